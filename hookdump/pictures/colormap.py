"""Colour maps as numpy tables: viridis (channel grids) and inferno (heat maps), perceptually uniform, from
the published anchor points (matplotlib's tables sampled at 0, 1/9, ..., 1), interpolated linearly to 256
levels; and grey. No matplotlib."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

NAMES = ("viridis", "inferno", "grey")
_ANCHORS = {
    "viridis": ["440154", "482878", "3e4989", "31688e", "26828e",
                "1f9e89", "35b779", "6ece58", "b5de2b", "fde725"],
    "inferno": ["000004", "1b0c41", "4a0c6b", "781c6d", "a52c60",
                "cf4446", "ed6925", "fb9b06", "f7d13d", "fcffa4"],
    "grey": ["000000", "ffffff"],
}  # fmt: skip
#: Drawn where a value is NaN or +-Inf: a colour none of the maps uses.
NONFINITE = (255, 0, 255)


@cache
def table(name: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The (256, 3) uint8 table of colour map ``name``: level 0 is the lowest value, 255 the highest."""
    anchors = np.array([[int(h[i : i + 2], 16) for i in (0, 2, 4)] for h in _ANCHORS[name]], float)
    where = np.linspace(0, 1, len(anchors))
    levels = np.linspace(0, 1, 256)
    columns = [np.interp(levels, where, anchors[:, c]) for c in range(3)]
    return np.clip(np.round(np.stack(columns, axis=1)), 0, 255).astype(np.uint8)


def paint(unit: np.ndarray[Any, Any], name: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """Values in 0..1 (NaN allowed) -> (..., 3) uint8 colours of ``name``; NaN becomes ``NONFINITE``."""
    finite = np.isfinite(unit)
    levels = np.round(np.clip(np.where(finite, unit, 0.0), 0, 1) * 255).astype(np.uint8)
    image = table(name)[levels]
    image[~finite] = NONFINITE
    return image
