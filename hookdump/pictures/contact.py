"""A contact sheet of one channel's top inputs (``hookdump top``): each input as the model saw it (the photo
cropped as the eval transform crops it) with that channel's map laid over it, labelled with the file name
and the value. numpy and Pillow only."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..inputs.images import exists, open_image
from .colormap import paint
from .grid import CHAR, LINE, PADDING, SEPARATOR, TEXT
from .maps import to_unit
from .overlay import blend, fit_photo

TILE = 128  # pixels of a tile's side, at least
ALPHA = 0.5


def tile(
    channel_map: np.ndarray[Any, Any] | None, photo: Path | None, transform: dict[str, Any] | None
) -> np.ndarray[Any, Any]:
    """One input's tile: the map (min-max scaled) over the photo as the model saw it, or alone when the
    photo is not there to be read; without a map (``None``), the photo alone, or a grey tile."""
    from PIL import Image

    unit = None if channel_map is None else to_unit(channel_map.astype(np.float32), None)[0]
    if photo is not None and exists(photo):
        seen, _ = fit_photo(open_image(photo), transform)
        side = max(TILE, max(seen.size))
        seen = seen.resize((side * seen.width // max(seen.size), side * seen.height // max(seen.size)))
        return np.asarray(seen) if unit is None else blend(unit, seen, ALPHA, "inferno")
    if unit is None:
        return np.full((TILE, TILE, 3), 128, np.uint8)
    coloured = Image.fromarray(paint(unit, "inferno"))
    return np.asarray(coloured.resize((TILE, TILE), Image.Resampling.NEAREST))


def contact_sheet(
    tiles: Sequence[np.ndarray[Any, Any]], labels: Sequence[str], caption: str
) -> Callable[[Path], object]:
    """``tiles`` in a square-ish grid, each with its label above it, under ``caption``; returns what writes
    it as a PNG to the path it is given (the caller's claim on the folder stages it)."""
    from PIL import Image, ImageDraw, ImageFont

    th = max(t.shape[0] for t in tiles)
    tw = max(max(t.shape[1] for t in tiles), CHAR * 12)
    cols = math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / cols)
    width = max(PADDING + cols * (tw + PADDING), 2 * PADDING + CHAR * len(caption))
    image = np.empty((PADDING + LINE + rows * (LINE + th + PADDING) + PADDING, width, 3), np.uint8)
    image[:] = SEPARATOR
    spots = []
    for k, picture in enumerate(tiles):
        r, c = divmod(k, cols)
        top, left = PADDING + LINE + PADDING + r * (LINE + th + PADDING) + LINE, PADDING + c * (tw + PADDING)
        image[top : top + picture.shape[0], left : left + picture.shape[1]] = picture
        spots.append((left, top - LINE))
    sheet = Image.fromarray(image)
    font = ImageFont.load_default_imagefont()
    pen = ImageDraw.Draw(sheet)
    pen.text((PADDING, PADDING), _latin(caption), fill=TEXT, font=font)
    for (left, top), label in zip(spots, labels, strict=True):
        pen.text((left, top), _latin(label[: tw // CHAR]), fill=TEXT, font=font)
    return lambda path: sheet.save(path, format="PNG", compress_level=3)


def _latin(text: str) -> str:
    """Pillow's bitmap font has Latin-1 only: other characters drawn as `?`."""
    return text.encode("latin-1", "replace").decode("latin-1")
