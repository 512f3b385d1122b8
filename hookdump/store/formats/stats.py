"""Numbers at a glance: min, max, mean, std, fraction of zeros, NaN and Inf of each captured tensor.

:class:`Accumulator` takes a tensor batch by batch (as ``writer.Writer`` streams it) or chunk by chunk (a
memory-mapped file, for ``hookdump stats`` on an older capture). Each row (one input) is summed in float64
in fixed pieces, and the pieces' sums are added exactly (Shewchuk's partials, as ``math.fsum``), so the result
does not depend on how the rows were batched: a resumed, merged or recomputed capture gives the same numbers,
bit for bit.
No torch import at module level.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import nonfinite

CHUNK_ELEMENTS = 1 << 22  # rows are read about this many values at a time (16 MB of float32)
PIECE = 1 << 15  # values of a row summed together in float64 (256 KB), the pieces' sums then added exactly
KEYS = ("min", "max", "mean", "std", "zeros", "nan", "inf")
FINITE_ONLY = "counted apart: min, max, mean and std are of the finite values"


class Accumulator:
    """Running min / max / sums / counts of one tensor; ``result()`` is its manifest ``stats`` entry."""

    def __init__(self) -> None:
        self.count = 0  # every element
        self.finite = 0
        self.zeros = 0
        self.nan = 0
        self.inf = 0
        self.min: float | None = None  # over the finite values
        self.max: float | None = None
        self.sum: list[float] = []  # exact partials of the finite values' row sums
        self.squares: list[float] = []  # ... and of their squares

    def update(self, rows: Any) -> None:
        """Add rows, batch first: a numpy array (a memmap too) or a CPU torch tensor of any dtype
        (bfloat16 included); read ``CHUNK_ELEMENTS`` values at a time, never the whole of it in float64."""
        if len(rows.shape) == 0:
            rows = rows.reshape(1)
        per_row = math.prod(int(d) for d in rows.shape[1:])
        if per_row == 0:
            return
        step = max(1, CHUNK_ELEMENTS // per_row)
        for start in range(0, int(rows.shape[0]), step):
            self._add(_values(rows[start : start + step]).reshape(-1, per_row))

    def _add(self, v: np.ndarray[Any, Any]) -> None:
        """One chunk of rows: counts, min and max in its own float dtype, sums in float64 ``PIECE`` values
        of a row at a time (a copy that stays in the CPU's cache)."""
        self.count += v.size
        self.zeros += int(np.count_nonzero(v == 0))  # NaN is not zero, -0.0 is (v == 0: 2x faster)
        low, high = v.min(), v.max()  # NaN reaches both, an infinity one of them
        clean = bool(np.isfinite(low) and np.isfinite(high))
        finite = v.size
        if not clean:
            finite_mask = np.isfinite(v)
            finite = int(np.count_nonzero(finite_mask))
            nan = int(np.count_nonzero(np.isnan(v)))
            self.nan += nan
            self.inf += v.size - finite - nan
            if finite:
                low, high = v[finite_mask].min(), v[finite_mask].max()
        self.finite += finite
        if finite:
            self.min = float(low) if self.min is None else min(self.min, float(low))
            self.max = float(high) if self.max is None else max(self.max, float(high))
        wide = np.empty((v.shape[0], min(PIECE, v.shape[1])), np.float64)  # reused: one allocation a chunk
        for start in range(0, v.shape[1], PIECE):  # the same pieces of a row whatever the rows around it
            piece = v[:, start : start + PIECE]
            x = wide[:, : piece.shape[1]]
            np.copyto(x, piece)  # each row's values stay contiguous: numpy sums them as it would a copy
            if not clean:
                x[~np.isfinite(x)] = 0.0
            for total in x.sum(axis=1).tolist():
                _exact_add(self.sum, total)
            np.multiply(x, x, out=x)
            for total in x.sum(axis=1).tolist():
                _exact_add(self.squares, total)

    def result(self) -> dict[str, Any]:
        """``{"min", "max", "mean", "std", "zeros", "nan", "inf"}``: the first four over the finite values
        (None when there are none; std as numpy's, ddof 0), ``zeros`` a fraction of all elements."""
        mean = std = None
        if self.finite:
            mean = math.fsum(self.sum) / self.finite
            std = math.sqrt(max(math.fsum(self.squares) / self.finite - mean * mean, 0.0))
        zeros = self.zeros / self.count if self.count else 0.0
        return {
            "min": self.min, "max": self.max, "mean": mean, "std": std, "zeros": zeros, "nan": self.nan,
            "inf": self.inf,
        }  # fmt: skip

    def state(self) -> dict[str, Any]:
        """Everything, as JSON (``progress.json``), for ``from_state`` after --resume."""
        return dict(vars(self))

    def add(self, other: Accumulator) -> None:
        """Take in what ``other`` counted (rows of the same tensor seen elsewhere: another rank's): the sums'
        partials added exactly, so the result is that of one accumulator over all the rows, bit for bit."""
        for name in ("count", "finite", "zeros", "nan", "inf"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, pick in (("min", min), ("max", max)):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, theirs if mine is None else mine if theirs is None else pick(mine, theirs))
        for partials, more in ((self.sum, other.sum), (self.squares, other.squares)):
            for x in more:
                _exact_add(partials, x)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Accumulator:
        acc = cls()
        for name, value in state.items():
            if name in vars(acc):
                setattr(acc, name, list(value) if isinstance(value, list) else value)
        return acc


def _values(chunk: Any) -> np.ndarray[Any, Any]:
    """A chunk as a float32 or float64 numpy array (bfloat16 and float16 widened exactly to float32)."""
    if not isinstance(chunk, np.ndarray):
        import torch

        if chunk.dtype in (torch.bfloat16, torch.float16):
            chunk = chunk.to(torch.float32)
        chunk = chunk.detach().cpu().numpy()
    array: np.ndarray[Any, Any] = chunk
    if array.dtype in (np.float32, np.float64):
        return array
    return array.astype(np.float32 if array.dtype == np.float16 else np.float64)


def _exact_add(partials: list[float], x: float) -> None:
    """Add ``x`` to the non-overlapping partials whose exact sum they hold (``math.fsum``'s algorithm)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        high = x + y
        low = y - (high - x)
        if low:
            partials[i] = low
            i += 1
        x = high
    partials[i:] = [x]


def of(rows: Any) -> dict[str, Any]:
    """The stats of a whole array or tensor (chunk by chunk)."""
    acc = Accumulator()
    acc.update(rows)
    return acc.result()


def nonfinite_notes(items: Iterable[tuple[str, str, Accumulator | None]]) -> list[str]:
    """For each ``(name, kind, accumulator)`` that met NaN or Inf: a note naming it."""
    return [
        line
        for name, kind, acc in items
        if acc is not None
        for line in nonfinite.note(f"{name} ({kind})", nonfinite.Count(acc.nan, acc.inf, acc.count))
    ]


def number(value: float | None, digits: int = 3) -> str:
    """0.123456 -> '0.123'; None (no finite value) -> '-'."""
    return "-" if value is None else f"{value:.{digits}g}"


def percent(fraction: float, decimals: int = 0) -> str:
    """0.41 -> '41%'; a little above 0 or below 1 never rounds to 0% or 100%."""
    text = f"{100 * fraction:.{decimals}f}%"
    if fraction > 0 and float(text[:-1]) == 0:
        return f"<{10**-decimals:g}%"
    if fraction < 1 and float(text[:-1]) == 100:
        return f">{100 - 10**-decimals:g}%"
    return text


def summary_cells(stats: dict[str, Any] | None) -> tuple[str, str, str, str]:
    """Capture's summary columns: ``mean 0.12``, ``std 0.5``, ``zeros 41%``, and NaN / Inf when any."""
    if stats is None:
        return ("", "", "", "")
    bad = [f"{label} {stats[key]:,}" for key, label in (("nan", "NaN"), ("inf", "Inf")) if stats[key]]
    return (
        f"mean {number(stats['mean'])}",
        f"std {number(stats['std'])}",
        f"zeros {percent(stats['zeros'])}",
        "  ".join(bad),
    )
