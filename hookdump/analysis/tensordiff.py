"""One tensor of a capture against its partner in another, streamed through their memory-mapped files in
chunks (bounded memory, whatever their size): shape, dtype, largest absolute and relative error, cosine
similarity, the fraction of elements out of tolerance, where the first of them is, and the NaN and
infinities of each side."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..store.folder.reader import Capture
from ..store.formats import nonfinite
from ..store.formats.npy import floats

CHUNK = 1 << 20  # elements of each side read at a time (8 MB in float64)


@dataclass
class TensorDiff:
    """One tensor of A against its partner in B. ``status``: ``same`` (every element equal), ``close``
    (within tolerance), ``differs``, or ``shape`` (the shapes differ: nothing else compared)."""

    name: str
    other: str
    shape_a: list[int]
    shape_b: list[int]
    dtype_a: str
    dtype_b: str
    status: str
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None  # None when one side is all zeros (1 when both are)
    out_of_tolerance: float | None = None  # a fraction of the elements
    elements: int = 0
    first_index: list[int] | None = None  # where the first element out of tolerance is
    first_values: list[str] | None = None  # A's and B's value there ("nan", "inf", "0.25")
    # NaN and infinities in A's tensor (B's), of its values: counted and named, never compared away
    nonfinite_a: nonfinite.Count = field(default_factory=nonfinite.Count)
    nonfinite_b: nonfinite.Count = field(default_factory=nonfinite.Count)

    @property
    def ok(self) -> bool:
        return self.status in ("same", "close")


def compare_tensor(
    left: Capture, name: str, right: Capture, other: str, atol: float, rtol: float, chunk: int = CHUNK
) -> TensorDiff:
    """One pair of tensors, ``chunk`` elements of each at a time."""
    ea, eb = left.entries[name], right.entries[other]
    record = TensorDiff(
        name, other, list(ea["shape"]), list(eb["shape"]), str(ea["dtype"]), str(eb["dtype"]), "shape"
    )
    if record.shape_a != record.shape_b:
        return record
    (xa, bf_a), (xb, bf_b) = left.bits(name), right.bits(other)
    xa, xb = xa.reshape(-1), xb.reshape(-1)  # views of the maps: nothing is read yet
    size = int(xa.shape[0])
    max_abs = max_rel = 0.0
    dot = sq_a = sq_b = 0.0
    bad = unequal = both = 0
    first: int | None = None
    with np.errstate(all="ignore"):  # inf - inf, 0 / 0: handled below, never printed
        for start in range(0, size, chunk):
            va, vb = floats(xa[start : start + chunk], bf_a), floats(xb[start : start + chunk], bf_b)
            equal = (va == vb) | (np.isnan(va) & np.isnan(vb))
            gap = np.abs(va - vb)
            gap[equal] = 0.0
            gap[np.isnan(gap)] = np.inf  # NaN on one side only, or +Inf against -Inf
            scale = np.abs(vb)
            out = ~equal & (np.isinf(gap) | (gap > atol + rtol * scale))
            if first is None and out.any():
                first = start + int(np.argmax(out))
            bad += int(np.count_nonzero(out))
            unequal += int(np.count_nonzero(~equal))
            if gap.size:
                max_abs = max(max_abs, float(gap.max()))
                rel = np.where(np.isinf(gap), np.inf, gap / np.where(scale > 0, scale, 1.0))
                rel[(scale == 0) & ~np.isinf(gap)] = 0.0  # relative to |b| where b is not 0 (else no size)
                max_rel = max(max_rel, float(rel.max()))
            finite = np.isfinite(va) & np.isfinite(vb)
            record.nonfinite_a.add(va)
            record.nonfinite_b.add(vb)
            both += int(np.count_nonzero(finite))
            fa, fb = va[finite], vb[finite]
            dot += float(fa @ fb)
            sq_a += float(fa @ fa)
            sq_b += float(fb @ fb)
    record.elements = size
    record.max_abs, record.max_rel = max_abs, max_rel
    record.cosine = _cosine(dot, sq_a, sq_b, finite_any=both > 0 or size == 0)
    record.out_of_tolerance = bad / size if size else 0.0
    record.status = "same" if unequal == 0 else "close" if bad == 0 else "differs"
    if first is not None:
        record.first_index = [int(i) for i in np.unravel_index(first, tuple(record.shape_a))]
        pair = floats(xa[first : first + 1], bf_a), floats(xb[first : first + 1], bf_b)
        record.first_values = [f"{float(v[0]):.6g}" for v in pair]
    return record


def _cosine(dot: float, sq_a: float, sq_b: float, finite_any: bool) -> float | None:
    """The cosine of the elements finite on both sides, in [-1, 1]; 1 when both are all zeros; None when
    it is not defined (no such element, or a zero side)."""
    if not finite_any:
        return None
    norm = math.sqrt(sq_a) * math.sqrt(sq_b)
    if norm > 0:
        return max(-1.0, min(1.0, dot / norm))
    return 1.0 if sq_a == sq_b == 0 else None
