"""One policy for values that are not finite (NaN, +Inf, -Inf), for every reader of a capture (``capture``'s
notes, ``stats``, ``show``, ``top``, ``diff``, ``compare``, ``report``): they are counted and named, never
silently dropped, and never reach JSON as ``NaN`` / ``Infinity`` (which JSON does not have)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Count:
    """How many NaN and how many infinities (+Inf or -Inf) some values hold, out of ``total``; added up
    chunk by chunk."""

    nan: int = 0
    inf: int = 0
    total: int = 0

    def __bool__(self) -> bool:
        return bool(self.nan or self.inf)

    def add(self, values: np.ndarray[Any, Any]) -> Count:
        """Count ``values`` too (any array); returns itself."""
        if values.dtype.kind in "fc":
            bad = int(values.size - np.count_nonzero(np.isfinite(values)))
            nan = int(np.count_nonzero(np.isnan(values))) if bad else 0  # one pass when all are finite
            self.nan += nan
            self.inf += bad - nan
        self.total += int(values.size)
        return self

    def text(self) -> str:
        """``3 NaN and 16 Inf of 1,024 values``."""
        return f"{self.nan:,} NaN and {self.inf:,} Inf of {self.total:,} values"


def count(values: np.ndarray[Any, Any]) -> Count:
    return Count().add(np.asarray(values))


def note(name: str, found: Count, how: str = "") -> list[str]:
    """``spoil holds 3 NaN and 16 Inf of 1,024 values[, how]`` when ``found`` holds any; else nothing."""
    return [f"{name} holds {found.text()}" + (f", {how}" if how else "")] if found else []


def safe(data: Any) -> Any:
    """``data`` for JSON: every float that is not finite becomes None (null), in lists and dicts too."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [safe(v) for v in data]
    return data
