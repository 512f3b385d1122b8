"""``hookdump diff A B``: two captures compared tensor by tensor, streamed through their memory-mapped files
in chunks (two 50 GB captures in bounded memory): shape, dtype, largest absolute and relative error, cosine
similarity, the fraction of elements out of tolerance, and the first tensor to diverge in the order the hooks
ran in the forward pass (the manifest's ``order``; without it, a note and the manifest's order). Here: the
pairs compared, the result and its table, the first divergence; ``tensordiff.py`` compares one pair."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..store.folder.reader import Capture
from ..store.formats import nonfinite
from .captures import check_inputs, open_capture, pair_names
from .tensordiff import CHUNK, TensorDiff, compare_tensor

EQUAL = "a NaN or an infinity equals only the same on the other side; the cosine leaves them out"


@dataclass
class DiffResult:
    """What ``diff`` found; ``differs`` is what exit code 1 says."""

    a: Path
    b: Path
    atol: float
    rtol: float
    tensors: list[TensorDiff]
    only_a: list[str]
    only_b: list[str]
    only_common: bool
    first_divergence: str | None
    notes: list[str] = field(default_factory=list)
    order: str = "forward"  # how first_divergence was found: "forward" (the hooks' order) or "manifest"

    @property
    def differs(self) -> bool:
        one_sided = bool(self.only_a or self.only_b) and not self.only_common
        return one_sided or any(not t.ok for t in self.tensors)

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": str(self.a), "b": str(self.b), "atol": self.atol, "rtol": self.rtol,
            "differs": self.differs, "first_divergence": self.first_divergence, "order": self.order,
            "tensors": [nonfinite.safe(asdict(t)) for t in self.tensors],
            "only_a": self.only_a, "only_b": self.only_b, "notes": self.notes,
        }  # fmt: skip

    def summary(self) -> str:
        """One aligned line per tensor, the tensors on one side only, and the verdict."""
        rows = [("tensor", "shape", "dtype", "max abs", "max rel", "cosine", "out of tol", "")]
        for t in self.tensors:
            name = t.name if t.name == t.other else f"{t.name} -> {t.other}"
            shape = (
                str(tuple(t.shape_a))
                if t.shape_a == t.shape_b
                else f"{tuple(t.shape_a)} vs {tuple(t.shape_b)}"
            )
            dtype = t.dtype_a if t.dtype_a == t.dtype_b else f"{t.dtype_a} vs {t.dtype_b}"
            cells = (_num(t.max_abs), _num(t.max_rel), _num(t.cosine, 7), _fraction(t.out_of_tolerance))
            rows.append((name, shape, dtype, *cells, t.status))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines += [f"only in {self.a}: {n}" for n in self.only_a] + [
            f"only in {self.b}: {n}" for n in self.only_b
        ]
        bad = sum(not t.ok for t in self.tensors)
        tol = f"|a - b| <= {self.atol:g} + {self.rtol:g} * |b|"
        if not self.differs:
            lines.append(f"same: {len(self.tensors)} tensor(s) within {tol}")
        else:
            sided = len(self.only_a) + len(self.only_b)
            lines.append(
                f"differ: {bad} of {len(self.tensors)} tensor(s) out of {tol}"
                + (f", {sided} on one side only" if sided else "")
                + (
                    f"; first divergence: {self.first_divergence}{self._where()}"
                    if self.first_divergence
                    else ""
                )
            )
        return "\n".join(lines)

    def _where(self) -> str:
        """`` at (0, 3, 1, 2): nan vs 0.25``: the first element of the first divergence out of tolerance."""
        first = next((t for t in self.tensors if t.name == self.first_divergence), None)
        if first is None or first.first_index is None or first.first_values is None:
            return ""
        return f" at {tuple(first.first_index)}: {first.first_values[0]} vs {first.first_values[1]}"


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def _fraction(x: float | None) -> str:
    return "-" if x is None else ("0" if x == 0 else f"{x:.3%}" if x >= 1e-5 else f"{x:.1e}")


def diff(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    atol: float = 1e-8,
    rtol: float = 1e-5,
    maps: Sequence[str] = (),
    only_common: bool = False,
    allow_different_inputs: bool = False,
    chunk: int = CHUNK,
) -> DiffResult:
    """Compare every tensor of capture ``a`` with the one of the same name (after ``maps``) in ``b``.

    An element is within tolerance when ``|a - b| <= atol + rtol * |b|`` (``numpy.isclose(a, b)``), NaN
    matching NaN and an infinity the same infinity.
    """
    if atol < 0 or rtol < 0 or not (math.isfinite(atol) and math.isfinite(rtol)):
        raise UsageError(
            f"--atol {atol} / --rtol {rtol}: tolerances are finite and >= 0.", "Use e.g. --atol 1e-5."
        )
    notes: list[str] = []
    a, b = Path(a), Path(b)
    left, right = open_capture(a), open_capture(b)
    check_inputs(left, right, allow_different_inputs, notes)
    pairs, only_a, only_b = pair_names(list(left), list(right), maps, notes)
    if not pairs:
        raise UsageError(
            f"`{a}` and `{b}` have no tensor name in common: nothing to compare.",
            f"Map A's names onto B's with --map 'PATTERN=REPLACEMENT' (A has {', '.join(list(left)[:3])};"
            f" B has {', '.join(list(right)[:3])}).",
        )
    if only_common and (only_a or only_b):
        notes.append(f"--only-common: {len(only_a) + len(only_b)} tensor(s) on one side only, not compared")
    tensors = [compare_tensor(left, name, right, other, atol, rtol, chunk) for name, other in pairs]
    for t in tensors:  # NaN and Inf: named, whether or not they differ
        said = nonfinite.note(f"{t.name} in `{a}`", t.nonfinite_a)
        said += nonfinite.note(f"{t.other} in `{b}`", t.nonfinite_b)
        notes += [*said[:-1], f"{said[-1]}; {EQUAL}"] if said else []
    ran, how = forward_order(left, right, pairs, notes)
    first = min((t.name for t in tensors if not t.ok), key=ran.__getitem__, default=None)
    return DiffResult(a, b, atol, rtol, tensors, only_a, only_b, only_common, first, notes, how)


def forward_order(
    left: Capture, right: Capture, pairs: list[tuple[str, str]], notes: list[str]
) -> tuple[dict[str, int], str]:
    """Where each of A's compared tensors comes in the forward pass: the manifest entries' ``order`` (when
    the hook ran), A's, else B's; without it (a capture by an older hookdump), the manifest's order and a
    note (the order of ``named_modules()``, then the calls, which is not always the order modules run in)."""
    for side, names in ((left, [n for n, _ in pairs]), (right, [o for _, o in pairs])):
        ran = [r for r in (side.entries[n].get("order") for n in names) if isinstance(r, int)]
        if len(ran) == len(pairs):
            return {name: r for (name, _), r in zip(pairs, ran, strict=True)}, "forward"
    notes.append(
        "the manifests record no forward order (captures by an older hookdump): the first divergence is"
        " the first in the manifest's order (named_modules() order, then each call), which is not always"
        " the order the modules ran in; capture again to have it"
    )
    return {name: i for i, (name, _) in enumerate(pairs)}, "manifest"
