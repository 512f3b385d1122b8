"""Captured tensors as PNGs: labelled channel grids (:mod:`hookdump.grid`), heat maps and Grad-CAM over the
photo (:mod:`hookdump.overlay`, :mod:`hookdump.gradcam`). Never prints; imports no torch (a ``.pt`` file
aside), so a PNG costs numpy and Pillow only.

:func:`show` renders one tensor to one PNG; :func:`show_many` renders every tensor and image asked for (a
capture folder, several files, ``index=None`` for every image), each PNG written to a scratch name first and
renamed into place only when all are drawn, so a failure leaves none. Names, beside each tensor file (or in
the ``output`` folder): ``<stem>.png``, ``<stem>.overlay.png`` with a photo, ``<stem>.gradcam.png`` for
Grad-CAM; for every image of the batch, ``<stem>.img<i>.png`` (``.img<i>.overlay.png``, ...).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HookdumpError, NoMap, UsageError
from ..inputs.images import exists, open_image, stamp
from ..store.folder import claims
from ..store.folder.manifest import ROLLOUT, picture_name
from ..store.folder.tensorfile import Array, Loaded, expand, is_gradient, load
from .attnviz import head_overlays, rollout_of
from .colormap import paint
from .gradcam import compute
from .grid import grid
from .maps import feature_maps, to_unit
from .overlay import blend, fit_photo, heat, photo_notes
from .style import Rendered, Shown, Style

if TYPE_CHECKING:
    from PIL.Image import Image


def show(
    file: Path, *, key: str | None = None, output: Path | None = None, index: int = 0, **style: Any
) -> Rendered:
    """Render one tensor (``key`` picks it in a safetensors file or capture folder) as one PNG."""
    options = Style(**style)
    options.check()
    loaded = load(file, key)
    out = _destination(output, 1)[0] or default_output(loaded, options, None, None)
    with _Staged([out], "show", "--output") as staged:
        image, rendered = render(loaded, index, options, out)
        staged.add(image, out)
        staged.commit()
    return rendered


def picture(file: Path, out: Path, *, key: str | None = None, index: int = 0, **style: Any) -> Rendered:
    """Draw one tensor as :func:`show` does into ``out``, a file the caller has claimed (``hookdump report``
    writes its pictures into a folder of its own that it claimed whole)."""
    options = Style(**style)
    options.check()
    image, rendered = render(load(file, key), index, options, out)
    save_png(image, out)
    return rendered


def save_png(image: Array, out: Path) -> None:
    from PIL import Image

    Image.fromarray(image).save(out, format="PNG", compress_level=3)  # 3x faster than 6, ~5% larger


def show_many(
    files: list[Path],
    *,
    key: str | None = None,
    output: Path | None = None,
    index: int | None = 0,
    command: str = "show",
    **style: Any,
) -> Shown:
    """Render every tensor ``files`` name (all of a capture folder or safetensors file without ``key``),
    image ``index`` of each, or every image when ``index`` is None; ``command`` names who draws them in
    a refusal (``capture --png``)."""
    options = Style(**style)
    options.check()
    many = len(files) > 1 or index is None
    pairs = []
    for path in files:
        named = expand(path, key)
        many = many or (key is None and (path.is_dir() or path.suffix.lower() == ".safetensors"))
        pairs += named
    loaded = [load(f, k) for f, k in pairs]
    if options.rollout:
        return _rollout(loaded, index, options, output, command)
    if options.gradcam:
        loaded = [t for t in loaded if not is_gradient(t)] or loaded
    jobs = [(t, i) for t in loaded for i in (range(t.count) if index is None else [index])]
    file, folder = _destination(output, len(jobs))
    outs = [file or default_output(t, options, None if index is not None else i, folder) for t, i in jobs]
    _no_clashes(outs)
    rendered, notes, skipped = [], [], []
    with _Staged(outs, command, "--output" if command == "show" else "--out") as staged:
        for (tensor, i), out in zip(jobs, outs, strict=True):
            try:
                image, done = render(tensor, i, options, out)
            except NoMap as exc:
                if not many:
                    raise
                skipped.append(exc)
                notes.append(f"{tensor.stem}: skipped: {exc.message}")
                continue
            staged.add(image, out)
            rendered.append(done)
        if not rendered and skipped:
            raise skipped[0]
        staged.commit()
    return Shown(rendered, notes, many)


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


def _rollout(
    loaded: list[Loaded], index: int | None, style: Style, output: Path | None, command: str
) -> Shown:
    """``--rollout``: one picture per image of the rollout through every attention tensor given."""
    images = range(loaded[0].count) if index is None and loaded else [index or 0]
    file, folder = _destination(output, len(images))
    where = folder or (loaded[0].path.parent if loaded else Path("."))
    outs = [
        file or where / picture_name(ROLLOUT, None if index is not None else i, style.suffix) for i in images
    ]
    rendered = []
    with _Staged(outs, command, "--output") as staged:
        for i, out in zip(images, outs, strict=True):
            unit, how, layers, said = rollout_of(loaded, i)
            image, done = _heat_picture(layers[0], i, style, out, unit, how)
            done.notes = said + done.notes  # NaN and Inf in the weights, counted
            staged.add(image, out)
            rendered.append(done)
        staged.commit()
    return Shown(rendered, [], index is None)


def _heat_picture(
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


def capture_pictures(out: Path, inputs: list[dict[str, Any]]) -> Shown:
    """``capture --png``: every tensor's grid of the first image beside it, and its heat map over the photo
    when the first input (of the manifest's ``inputs``) is a photo still on disk. What cannot be drawn
    (vectors, windowed attention, an unreadable photo) is said in a note, never an error: the capture
    itself is done."""
    first = inputs[0].get("path") if inputs else None
    photo = Path(first) if first and exists(Path(first)) else None
    drawn: list[Rendered] = []
    notes: list[str] = []
    for over in [None, photo] if photo is not None else [None]:
        try:
            shown = show_many([out], index=0, photo=over, command="capture --png")
        except HookdumpError as exc:
            notes.append(f"--png: {exc.message}")
            continue
        drawn += shown.rendered
        notes += [f"--png: {n}" for n in shown.notes] + [n for r in shown.rendered for n in r.notes]
    return Shown(drawn, list(dict.fromkeys(notes)), True)


def parse_index(text: str) -> int | None:
    """``--index``: an image number, or ``all`` (None)."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(
            f"--index `{text}` is not an image number.", "Use --index 0, 1, ... or all."
        ) from None
    if value < 0:
        raise UsageError(
            f"--index {value} is out of range: images count from 0.", "Use --index 0, 1, ... or all."
        )
    return value


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


def default_output(loaded: Loaded, style: Style, image: int | None, folder: Path | None) -> Path:
    """``<stem>[.img<i>][.overlay|.gradcam].png`` in ``folder``, else beside the tensor file."""
    return (folder or loaded.path.parent) / picture_name(loaded.stem, image, style.suffix)


def _destination(output: Path | None, pictures: int) -> tuple[Path | None, Path | None]:
    """``--output`` as (one PNG file, None) or (None, a folder for every PNG); refused when it cannot be."""
    if output is None:
        return None, None
    if output.suffix.lower() == ".png":
        if pictures > 1:
            raise UsageError(
                f"--output `{output}` names one PNG, but this draws {pictures} pictures.",
                "Give --output a folder (a name without .png), or leave it out to write each PNG beside"
                " its tensor.",
            )
        return output, None
    if output.is_dir() or not output.suffix:
        return None, output
    raise UsageError(
        f"--output `{output}` does not end in .png.", "Name the PNG file, e.g. -o maps.png (or a folder)."
    )


def _no_clashes(outs: list[Path]) -> None:
    seen: set[Path] = set()
    for out in outs:
        if out in seen:
            raise UsageError(
                f"Two pictures would both be written to `{out}`.",
                "Show them in separate runs, or leave --output out so each goes beside its tensor.",
            )
        seen.add(out)


class _Staged:
    """The PNGs of one command, checked before any is drawn (``claims.claim`` for each folder they go to: a
    user's file in the way is refused), then each written beside its place and renamed in by
    :meth:`commit`; leaving the ``with`` block without a commit removes what was written."""

    def __init__(self, outs: list[Path], command: str, option: str) -> None:
        folders: dict[Path, list[str]] = {}
        for out in outs:
            folders.setdefault(out.parent, []).append(out.name)
        self.claims: dict[Path, claims.Claim] = {}
        for folder, names in folders.items():
            self.claims[folder] = claims.claim(folder, names, command, option)

    def add(self, image: Array, out: Path) -> None:
        self.claims[out.parent].stage(out.name, lambda tmp: save_png(image, tmp))

    def commit(self) -> None:
        for claim in self.claims.values():
            claim.commit()

    def __enter__(self) -> _Staged:
        return self

    def __exit__(self, *exc: object) -> None:
        for claim in self.claims.values():
            claim.discard()
