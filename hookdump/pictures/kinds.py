"""One tensor's picture as an array, by kind: a labelled channel grid, a heat map or Grad-CAM over the photo,
one tile per attention head, an attention rollout; and what it shows (:class:`~.style.Rendered`). Writes
nothing: :mod:`.draw` says what to draw, :mod:`.pngs` writes it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..inputs.images import open_image, stamp
from ..store.folder.tensorfile import Array, Loaded
from .attnviz import head_overlays
from .colormap import paint
from .gradcam import compute
from .grid import grid
from .maps import feature_maps, to_unit
from .overlay import blend, fit_photo, heat, photo_notes
from .style import Rendered, Style

if TYPE_CHECKING:
    from PIL.Image import Image


def render(loaded: Loaded, index: int, style: Style, out: Path) -> tuple[Array, Rendered]:
    """The picture of image ``index`` of ``loaded`` (grid, heat map or Grad-CAM) and what it shows."""
    maps = feature_maps(loaded, index)
    common: dict[str, Any] = dict(
        path=out, source=loaded.source, name=loaded.name, shape=list(loaded.array.shape), index=index,
        layout=maps.layout, channels=len(maps.maps),
    )  # fmt: skip
    if style.photo is None:
        colours = style.colours(heat=False)
        caption = [loaded.name, f"image {index} of {tuple(loaded.array.shape)}", maps.layout]
        sheet = grid(
            maps.maps, caption, name=loaded.stem, channels=style.channels, top_k=style.top_k,
            max_channels=style.max_channels, scale=style.scale, colours=colours,
        )  # fmt: skip
        height, width = sheet.image.shape[:2]
        return sheet.image, Rendered(
            width=width, height=height, **common, channels_shown=len(sheet.tiles), columns=sheet.columns,
            tile=sheet.tile, notes=sheet.notes, selection=sheet.selection, scale=sheet.scale,
            colormap=colours, caption_height=sheet.caption_height, tiles=sheet.tiles,
        )  # fmt: skip

    colours = style.colours(heat=True)
    fitted, fit = _fitted(loaded, style)
    if loaded.layout == "attn" and not style.gradcam:
        return _attention_overlay(loaded, index, style, maps.maps, fitted, common | {"fit": fit})
    target = None
    if style.gradcam:
        cam = compute(loaded, index)
        unit, notes, target = cam.cam, cam.notes, cam.target
    else:
        unit, notes = heat(maps.maps, loaded.stem)
    image = blend(unit, fitted, style.alpha, colours)
    notes += photo_notes(loaded, style.photo, index)
    return image, Rendered(
        width=image.shape[1], height=image.shape[0], **common, channels_shown=len(maps.maps),
        overlay=style.photo, fit=fit, notes=notes, kind="gradcam" if style.gradcam else "overlay",
        scale="min-max scaled", colormap=colours, padding=0, label_height=0, target=target,
    )  # fmt: skip


def _attention_overlay(
    loaded: Loaded, index: int, style: Style, maps: Array, fitted: Image, common: dict[str, Any]
) -> tuple[Array, Rendered]:
    """Attention weights over the photo: one tile per head (:func:`attnviz.head_overlays`)."""
    colours = style.colours(heat=True)
    caption = [loaded.name, f"image {index} of {tuple(loaded.array.shape)}", common["layout"]]
    image, tiles, columns, tile, top, notes = head_overlays(
        maps, fitted, style.alpha, colours, caption, loaded.stem
    )
    notes += photo_notes(loaded, style.photo, index) if style.photo else []
    return image, Rendered(
        width=image.shape[1], height=image.shape[0], **common, channels_shown=len(maps), columns=columns,
        tile=tile, overlay=style.photo, notes=notes, kind="attention", selection=f"{len(maps)} heads",
        scale="each head min-max scaled on its own", colormap=colours, caption_height=top, tiles=tiles,
    )  # fmt: skip


def heat_picture(
    loaded: Loaded, index: int, style: Style, out: Path, heat: Array, how: str
) -> tuple[Array, Rendered]:
    """One heat map ``heat`` (h, w): over the photo with ``style.photo``, else alone, enlarged."""
    unit = to_unit(heat, None)[0]
    colours = style.colours(heat=True)
    common: dict[str, Any] = dict(
        path=out, source=loaded.source, name="attention rollout", shape=list(loaded.array.shape),
        index=index, layout=how, channels=1, channels_shown=1, kind="rollout", colormap=colours,
        scale="min-max scaled", padding=0, label_height=0,
    )  # fmt: skip
    if style.photo is None:
        factor = max(1, 224 // max(unit.shape))
        image = paint(unit, colours).repeat(factor, axis=0).repeat(factor, axis=1)
        return image, Rendered(width=image.shape[1], height=image.shape[0], **common)
    fitted, fit = _fitted(loaded, style)
    image = blend(unit, fitted, style.alpha, colours)
    notes = photo_notes(loaded, style.photo, index)
    rendered = Rendered(width=image.shape[1], height=image.shape[0], **common, overlay=style.photo, fit=fit)
    rendered.notes = notes
    return image, rendered


def _fitted(loaded: Loaded, style: Style) -> tuple[Image, str]:
    """``--overlay``'s photo as the model's eval transform cropped it: decoded and cropped once per version
    of the photo and transform, however many tensors are drawn over it."""
    assert style.photo is not None
    transform = json.dumps((loaded.manifest or {}).get("transform"), sort_keys=True)
    return _fit_once(str(style.photo), stamp(style.photo), transform)


@functools.lru_cache(maxsize=8)
def _fit_once(photo: str, stamp: tuple[int, int], transform: str) -> tuple[Image, str]:

    return fit_photo(open_image(Path(photo), option="--overlay"), json.loads(transform))
