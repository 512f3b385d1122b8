"""A labelled sheet of channel maps: which channels, how they are scaled, where each tile lands.

Geometry (all in pixels; ``P`` = ``PADDING``, ``L`` = ``LABEL``): maps smaller than ``MIN_TILE`` are enlarged
by the whole factor ``s = MIN_TILE // max(H, W)`` (nearest neighbour), so a tile is ``th x tw`` =
``H*s x W*s``; ``cols = ceil(sqrt(n))`` tiles a row. The sheet starts with a caption strip ``C`` pixels high
(``P + 12`` per text line); tile ``k`` (row-major, in drawing order) has its top-left corner at
``top = C + P + r*(L + th + P) + L``, ``left = P + c*(tw + P)`` with ``r, c = divmod(k, cols)``, and its
channel index written in the ``L``-pixel strip above it. The sheet is ``max(cols*(tw + P) + P, MIN_WIDTH)``
wide and ``C + rows*(L + th + P) + P`` high; everything around the tiles is ``SEPARATOR`` blue.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UsageError
from ..store.formats import nonfinite
from ..units import first_few
from .colormap import paint
from .maps import describe_nonfinite, no_finite, to_unit

if TYPE_CHECKING:
    from ..store.folder.tensorfile import Array

PADDING = 2
LABEL = 12
LINE = 12
MIN_TILE = 64
MIN_WIDTH = 256
CHAR = 6  # width of a character of Pillow's default bitmap font
SEPARATOR = (40, 90, 160)
TEXT = (255, 255, 255)
SCALES = ("channel", "global")


@dataclass
class Tile:
    """Where the map of ``channel`` lies in the PNG: its top-left pixel."""

    channel: int
    top: int
    left: int


@dataclass
class Sheet:
    """A drawn grid and its geometry."""

    image: Array
    tiles: list[Tile]
    columns: int
    tile: tuple[int, int]
    caption_height: int
    selection: str
    scale: str
    notes: list[str]


def grid(
    maps: Array,
    caption: list[str],
    *,
    name: str,
    channels: str | None = None,
    top_k: int | None = None,
    max_channels: int = 64,
    scale: str = "channel",
    colours: str = "viridis",
) -> Sheet:
    """Pick the channels, scale them, draw them under ``caption`` (plus a line on the choice and scaling)."""
    chosen, selection = select(maps, channels, top_k, max_channels, name)
    unit, how, notes = scaled(maps[chosen], chosen, scale, name)
    if top_k is not None and channels is None:
        notes += _ranked_nonfinite(maps, name)
    image, tiles, columns, tile, top = draw(
        unit, chosen, [*caption, f"{selection}; {how}; {colours}"], colours
    )
    return Sheet(image, tiles, columns, tile, top, selection, how, notes)


def select(
    maps: Array, channels: str | None, top_k: int | None, max_channels: int, name: str
) -> tuple[list[int], str]:
    """The channels to draw, in order, and in words: ``channels`` ``A:B`` (half-open), the ``top_k``
    largest by mean |activation| (largest first), or the first ``max_channels``."""
    count = len(maps)
    if channels is not None:
        start, stop = _range(channels, count, name)
        return list(range(start, stop)), f"channels {start}:{stop} of {count}"
    if top_k is not None:
        magnitude = np.where(np.isfinite(maps), np.abs(maps), np.nan).reshape(count, -1)
        with np.errstate(all="ignore"):
            means = np.nan_to_num(np.nanmean(magnitude, axis=1) if magnitude.size else magnitude, nan=-1.0)
        order = np.argsort(-means, kind="stable")[:top_k]
        return [int(c) for c in order], f"the {len(order)} of {count} channels of largest mean |activation|"
    shown = min(count, max_channels)
    return list(range(shown)), f"channels 0:{shown} of {count}"


def _ranked_nonfinite(maps: Array, name: str) -> list[str]:
    """What --top-k made of NaN and Inf (``select`` ranks by the finite values): which channels hold them,
    counted over all the channels it ranked."""
    bad = np.flatnonzero(~np.isfinite(maps.reshape(len(maps), -1)).all(axis=1))
    if not bad.size:
        return []
    return [
        f"--top-k: channel(s) {_some([int(c) for c in bad])} of {name} hold NaN or Inf"
        f" ({nonfinite.count(maps).text()}): each is ranked by the mean |activation| of its finite values"
        " (one with none, last)"
    ]


def _range(text: str, count: int, name: str) -> tuple[int, int]:
    """``A:B`` (either end may be left out) -> a non-empty half-open range inside ``0..count``."""
    fix = f"Use --channels A:B with 0 <= A < B <= {count} (half-open: 0:8 is channels 0 to 7)."
    head, sep, tail = text.partition(":")
    try:
        start = int(head) if head.strip() else 0
        stop = int(tail) if tail.strip() else count
    except ValueError:
        raise UsageError(f"--channels `{text}` is not A:B.", fix) from None
    if not sep or not 0 <= start < stop <= count:
        raise UsageError(f"--channels `{text}` is outside the {count} channels of {name}.", fix)
    return start, stop


def scaled(maps: Array, channels: list[int], scale: str, name: str) -> tuple[Array, str, list[str]]:
    """Each map (``channel``) or all of them together (``global``) min-max scaled to 0..1 over their
    finite values; NaN where a value is not finite. Returns also the scaling in words and the notes."""
    notes = describe_nonfinite(name, maps, "drawn in magenta; the scaling ignores them")
    if scale == "channel" and maps.shape[1:] == (1, 1) and len(maps) > 1:
        scale = "global"
        notes.append(f"{name}: the maps are 1x1 (one value per channel): drawn on one global scale instead")
    unit, low, high, flat = to_unit(maps, (1, 2) if scale == "channel" else None)
    empty = no_finite(maps)
    if empty.any():
        gone = [c for c, e in zip(channels, empty, strict=True) if e]
        notes.append(
            f"{name}: {len(gone)} of {len(maps)} drawn channels hold no finite value ({_some(gone)}),"
            " drawn all magenta"
        )
    dull = [c for c, f, e in zip(channels, flat.ravel(), empty, strict=False) if f and not e]
    if scale == "global" and flat.all() and not empty.all():
        notes.append(
            f"{name}: every drawn value is {float(low.flat[0]):g}: all tiles drawn as the lowest colour"
        )
    elif dull and len(dull) == len(maps) > 1:
        notes.append(f"{name}: all {len(dull)} drawn channels are constant, drawn as the lowest colour"
                     " (--scale global tells their values apart)")  # fmt: skip
    elif dull:
        notes.append(
            f"{name}: {len(dull)} of {len(maps)} drawn channels are constant ({_some(dull)}),"
            " drawn as the lowest colour"
        )
    if scale == "channel":
        return unit, "each channel min-max scaled on its own", notes
    return unit, f"one scale for all, {float(low.flat[0]):.4g} to {float(high.flat[0]):.4g}", notes


def _some(items: list[int], n: int = 8) -> str:
    return first_few([str(i) for i in items], n)


def draw(
    unit: Array, channels: list[int], caption: list[str], colours: str
) -> tuple[Array, list[Tile], int, tuple[int, int], int]:
    """The sheet: caption, then ``unit`` maps (0..1, NaN drawn magenta) as labelled tiles (see above)."""
    height, width = unit.shape[1:]
    factor = max(1, MIN_TILE // max(height, width))
    tiles = paint(unit, colours).repeat(factor, axis=1).repeat(factor, axis=2)
    return sheet(tiles, channels, caption)


def sheet(
    tiles: Array, channels: list[int], caption: list[str]
) -> tuple[Array, list[Tile], int, tuple[int, int], int]:
    """Coloured ``tiles`` ``(K, th, tw, 3)`` laid out under ``caption``, each labelled with its number in
    ``channels`` (a channel, or a head of an attention picture); see the module docstring for where."""
    from PIL import Image, ImageDraw, ImageFont

    count, th, tw = tiles.shape[:3]
    cols = math.ceil(math.sqrt(count))
    rows = math.ceil(count / cols)
    sheet_width = max(cols * (tw + PADDING) + PADDING, MIN_WIDTH)
    lines = [part for line in caption for part in textwrap.wrap(line, (sheet_width - 2 * PADDING) // CHAR)]
    top0 = PADDING + LINE * len(lines)
    image = np.empty((top0 + rows * (LABEL + th + PADDING) + PADDING, sheet_width, 3), np.uint8)
    image[:] = SEPARATOR
    placed = []
    for k, channel in enumerate(channels):
        r, c = divmod(k, cols)
        top, left = top0 + PADDING + r * (LABEL + th + PADDING) + LABEL, PADDING + c * (tw + PADDING)
        image[top : top + th, left : left + tw] = tiles[k]
        placed.append(Tile(channel, top, left))
    picture = Image.fromarray(image)
    font = ImageFont.load_default_imagefont()
    pen = ImageDraw.Draw(picture)
    for i, line in enumerate(lines):  # the bitmap font has Latin-1 only: other characters are drawn as `?`
        shown = line.encode("latin-1", "replace").decode("latin-1")
        pen.text((PADDING, PADDING + i * LINE), shown, fill=TEXT, font=font)
    for spot in placed:
        label = Image.new("RGB", (tw, LABEL), SEPARATOR)
        ImageDraw.Draw(label).text((1, 0), str(spot.channel), fill=TEXT, font=font)
        picture.paste(label, (spot.left, spot.top - LABEL))
    return np.asarray(picture), placed, cols, (th, tw), top0
