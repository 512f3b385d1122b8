"""A labelled heat map of a layer x layer matrix (``hookdump compare --png``): rows and columns named by
the layers, a colour per value (viridis, 0 to 1; a value that is not defined in magenta), the values
printed in the cells while they fit, a caption. numpy and Pillow only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .colormap import paint
from .grid import CHAR, LINE, PADDING, SEPARATOR, TEXT

CELL_WITH_VALUES = 40  # pixels a cell needs for "0.97"
MAX_VALUES = 16  # values are printed in cells of matrices up to this many rows and columns


def heatmap(
    matrix: Sequence[Sequence[float | None]],
    rows: Sequence[str],
    cols: Sequence[str],
    caption: str,
) -> Callable[[Path], object]:
    """Draw ``matrix`` (``len(rows) x len(cols)``, values in 0..1, None: not defined); returns what writes
    it as a PNG to the path it is given (the caller's claim on the folder stages it)."""
    from PIL import Image, ImageDraw, ImageFont

    values = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    n_rows, n_cols = values.shape
    printed = max(n_rows, n_cols) <= MAX_VALUES
    cell = CELL_WITH_VALUES if printed else max(4, min(24, 800 // max(n_rows, n_cols)))
    left = PADDING + CHAR * max((len(r) for r in rows), default=1) + PADDING
    top = 2 * PADDING + LINE + CHAR * max((len(c) for c in cols), default=1) + PADDING
    width = max(left + n_cols * cell + PADDING, PADDING * 2 + CHAR * len(caption))
    image = np.empty((top + n_rows * cell + PADDING, width, 3), np.uint8)
    image[:] = SEPARATOR
    colours = paint(values, "viridis").repeat(cell, axis=0).repeat(cell, axis=1)
    image[top : top + n_rows * cell, left : left + n_cols * cell] = colours
    picture = Image.fromarray(image)
    font = ImageFont.load_default_imagefont()
    pen = ImageDraw.Draw(picture)
    pen.text((PADDING, PADDING), _latin(caption), fill=TEXT, font=font)
    for i, name in enumerate(rows):
        pen.text((PADDING, top + i * cell + (cell - LINE) // 2), _latin(name), fill=TEXT, font=font)
    for j, name in enumerate(cols):  # column names written upwards
        label = Image.new("RGB", (CHAR * len(name) + 2, LINE), SEPARATOR)
        ImageDraw.Draw(label).text((1, 0), _latin(name), fill=TEXT, font=font)
        turned = label.rotate(90, expand=True)
        picture.paste(turned, (left + j * cell + (cell - LINE) // 2, top - PADDING - turned.height))
    if printed:
        for i in range(n_rows):
            for j in range(n_cols):
                v = values[i, j]
                text = "-" if not np.isfinite(v) else f"{v:.2f}"
                ink = (0, 0, 0) if np.isfinite(v) and v > 0.6 else TEXT
                at = (left + j * cell + (cell - CHAR * len(text)) // 2, top + i * cell + (cell - LINE) // 2)
                pen.text(at, text, fill=ink, font=font)
    return lambda path: picture.save(path, format="PNG")


def _latin(text: str) -> str:
    """Pillow's bitmap font has Latin-1 only: other characters drawn as `?`."""
    return text.encode("latin-1", "replace").decode("latin-1")
