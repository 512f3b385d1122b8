"""Windowed tensors for ``show``: Swin's attention runs on windows of the map, so the tensors inside it
(``layers.0.blocks.0.attn``: ``(N * 64, 49, 96)``) hold ``per_image`` rows per image, recorded by capture as
layout ``windows`` with the manifest's ``windows`` record (:func:`hookdump.model.layouts.saved`). numpy only.

Where the record has the geometry (``size`` of a window, ``map`` the block's ``(H, W)``, ``shift`` its cyclic
shift), one image's windows are put back exactly as timm's ``window_reverse`` does: windows row-major over
the map padded to whole windows, the padding cropped, the shift rolled back. Without it they are refused.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import NoMap

if TYPE_CHECKING:
    from ..store.folder.tensorfile import Array, Loaded


def unwindow(loaded: Loaded, index: int) -> tuple[Array, str]:
    """Image ``index``'s ``(C, H, W)`` maps from its windows of tokens, and what they are in words."""
    record: dict[str, Any] = loaded.windows or {}
    per_image = int(record["per_image"])
    shape = tuple(int(n) for n in loaded.array.shape)
    size, grid, shift = record.get("size"), record.get("map"), record.get("shift") or [0, 0]
    what = f"{loaded.name}: {per_image} windows per image, shape {shape} for {loaded.count} image(s)"
    if len(shape) != 3 or not size or not grid:
        raise NoMap(
            f"{what}. show cannot put them back on the image: the capture did not record where each window"
            " lies (window size and map size).",
            "Show the block around it instead (its output is the whole map), or reassemble the windows"
            " yourself from the model's window partition.",
        )
    (wh, ww), (h, w) = size, grid
    rows, cols = math.ceil(h / wh), math.ceil(w / ww)
    if shape[1] != wh * ww or rows * cols != per_image:
        raise NoMap(
            f"{what}: windows of {shape[1]} tokens do not make {wh}x{ww} windows tiling a {h}x{w} map.",
            "Show the block around it instead (its output is the whole map).",
        )
    item = np.asarray(loaded.array[index * per_image : (index + 1) * per_image])
    item = (item.astype(np.uint32) << 16).view(np.float32) if loaded.bfloat16 else item.astype(np.float32)
    channels = shape[2]
    tiles = item.reshape(rows, cols, wh, ww, channels).transpose(0, 2, 1, 3, 4)
    whole = tiles.reshape(rows * wh, cols * ww, channels)[:h, :w]
    whole = np.roll(whole, shift=tuple(int(s) for s in shift), axis=(0, 1))
    shifted = f", shifted by {tuple(shift)} and rolled back" if any(shift) else ""
    how = (
        f"{channels} maps of {h}x{w}: {per_image} windows of {wh}x{ww} tokens put back in place{shifted}"
        " (layout windows, as the capture recorded)"
    )
    return np.ascontiguousarray(whole.transpose(2, 0, 1)), how


def not_per_image(loaded: Loaded) -> NoMap | None:
    """A tensor whose rows are not one per image though no windows are recorded (a capture from before
    hookdump recorded them): refused rather than drawing a window as an image."""
    images, rows = loaded.images, len(loaded.array)
    if loaded.windows or images is None or rows == images:
        return None
    return NoMap(
        f"{loaded.name}: its first axis holds {rows} rows for the capture's {images} image(s) (windows, as"
        " in Swin), and the manifest records no windows layout for it: row k is not image k.",
        "Capture it again with this hookdump (which records windowed layouts), or show the block around it.",
    )
