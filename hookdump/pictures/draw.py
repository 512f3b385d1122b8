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

from pathlib import Path
from typing import Any

from ..errors import HookdumpError, NoMap, UsageError
from ..inputs.images import exists
from ..store.folder.manifest import ROLLOUT, picture_name
from ..store.folder.tensorfile import Loaded, expand, is_gradient, load
from .attnviz import rollout_of
from .kinds import heat_picture, render
from .pngs import Staged, default_output, destination, no_clashes, save_png
from .style import Rendered, Shown, Style


def show(
    file: Path, *, key: str | None = None, output: Path | None = None, index: int = 0, **style: Any
) -> Rendered:
    """Render one tensor (``key`` picks it in a safetensors file or capture folder) as one PNG."""
    options = Style(**style)
    options.check()
    loaded = load(file, key)
    out = destination(output, 1)[0] or default_output(loaded, options, None, None)
    with Staged([out], "show", "--output") as staged:
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
    file, folder = destination(output, len(jobs))
    outs = [file or default_output(t, options, None if index is not None else i, folder) for t, i in jobs]
    no_clashes(outs)
    rendered, notes, skipped = [], [], []
    with Staged(outs, command, "--output" if command == "show" else "--out") as staged:
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


def _rollout(
    loaded: list[Loaded], index: int | None, style: Style, output: Path | None, command: str
) -> Shown:
    """``--rollout``: one picture per image of the rollout through every attention tensor given."""
    images = range(loaded[0].count) if index is None and loaded else [index or 0]
    file, folder = destination(output, len(images))
    where = folder or (loaded[0].path.parent if loaded else Path("."))
    outs = [
        file or where / picture_name(ROLLOUT, None if index is not None else i, style.suffix) for i in images
    ]
    rendered = []
    with Staged(outs, command, "--output") as staged:
        for i, out in zip(images, outs, strict=True):
            unit, how, layers, said = rollout_of(loaded, i)
            image, done = heat_picture(layers[0], i, style, out, unit, how)
            done.notes = said + done.notes  # NaN and Inf in the weights, counted
            staged.add(image, out)
            rendered.append(done)
        staged.commit()
    return Shown(rendered, [], index is None)


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
