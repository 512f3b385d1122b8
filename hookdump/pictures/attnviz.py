"""Attention pictures for ``show``: each head's map laid over the photo the model saw, and the attention
rollout through several blocks (``show OUT --rollout``). The maps come from :mod:`hookdump.attnmaps`."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UsageError
from ..store.formats import nonfinite
from .attnmaps import check_global, rollout
from .grid import Tile, sheet
from .maps import check_index, describe_nonfinite, no_finite, to_unit
from .overlay import blend

if TYPE_CHECKING:
    from PIL.Image import Image

    from ..store.folder.tensorfile import Array, Loaded


def head_overlays(
    maps: Array, photo: Image, alpha: float, colours: str, caption: list[str], name: str
) -> tuple[Array, list[Tile], int, tuple[int, int], int, list[str]]:
    """One tile per head: its map, min-max scaled on its own, blended over ``photo``; the sheet, its tiles,
    columns, tile size, caption height and notes (heads that attend evenly, drawn flat; NaN and Inf)."""
    unit, _, _, flat = to_unit(maps, (1, 2))
    tiles = np.stack([blend(head, photo, alpha, colours) for head in unit])
    image, placed, columns, tile, top = sheet(tiles, list(range(len(maps))), caption)
    empty = no_finite(maps)
    even = [h for h, (f, e) in enumerate(zip(flat.ravel(), empty, strict=True)) if f and not e]
    notes = describe_nonfinite(name, maps, "drawn in magenta; the scaling ignores them")
    notes += [f"{name}: head(s) {', '.join(map(str, even))} attend evenly: drawn flat"] if even else []
    gone = [str(h) for h, e in enumerate(empty) if e]
    notes += [f"{name}: head(s) {', '.join(gone)} hold no finite value: drawn all magenta"] if gone else []
    return image, placed, columns, tile, top, notes


def rollout_of(tensors: list[Loaded], index: int) -> tuple[Array, str, list[Loaded], list[str]]:
    """The rollout map ``(h, w)`` of image ``index`` through every attention tensor in ``tensors`` (in
    their layers' order, numbers compared as numbers), what it is in words, the layers used, and a note
    when their weights hold NaN or Inf (which spread through the products)."""
    attention = sorted((t for t in tensors if t.layout == "attn"), key=lambda t: _natural(t.stem))
    if not attention:
        raise UsageError(
            "--rollout multiplies the attention weights of several blocks, and none were given.",
            "Capture them first (capture -l 'blocks.*.attn' --attention -o OUT), then show OUT --rollout.",
        )
    for tensor in attention:
        shape = tuple(int(n) for n in tensor.array.shape)
        check_global(shape, tensor.images, tensor.windows)
        check_index(tensor.count, index)
    prefix, cls = attention[0].prefix_tokens or 0, attention[0].class_token
    layers = [tensor.image(index).astype(np.float64) for tensor in attention]
    with np.errstate(all="ignore"):  # inf / inf where the weights hold them: counted below, never printed
        result = rollout(layers, prefix, cls).astype(np.float32)
    token = "the class token's" if cls else "the patches' mean"
    names = attention[0].stem + (f" ... {attention[-1].stem}" if len(attention) > 1 else "")
    how = f"attention rollout through {len(layers)} block(s) ({names}), {token} row over the patches"
    found = nonfinite.Count()
    for layer in layers:
        found.add(layer)
    spread = f"the rollout holds {nonfinite.count(result).text()}, drawn in magenta"
    return result, how, attention, nonfinite.note(f"the attention of image {index} ({names})", found, spread)


def _natural(text: str) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
