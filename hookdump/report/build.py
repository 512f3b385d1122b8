"""``hookdump report OUT``: a static page of a finished capture, to look at in a browser. Never prints.

What it writes, all inside ``OUT`` so the folder can be moved or copied whole:

* ``OUT/index.html``: provenance, inputs, one section per captured tensor (``page.py`` makes the HTML);
* ``OUT/report/<name>.png``: each tensor's channel grid for image 0, drawn by ``draw.show`` (tensors with no
  spatial map, such as logits or ``--reduce`` outputs, get their numbers and the reason instead);
* ``OUT/report/inputs/<i>.jpg``: thumbnails of the input photos that are still where the capture read them.

What ``compare --png`` and ``top`` left in the folder (``OUT/compare/<metric>.json`` and its heat map,
``OUT/top/<layer>/top.json`` and its contact sheets) gets a section each, linking their pictures in place.

Every link is relative; nothing comes from the network. Both are written through the store's claim on the
folder (``claims``): a file of the user's in their way is refused before any work, the new report is built
beside the old one and swapped in at the end, so a failed run leaves the earlier report as it was.
``hookdump.open(OUT)``, ``stats`` and ``merge`` read only what ``manifest.json`` lists, so the report's files
are no trouble to them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..digest import sha256
from ..errors import InputError, UsageError
from ..failures import from_environment
from ..inputs.images import digest, exists, open_image
from ..pictures import draw
from ..store.folder import claims
from ..store.folder.journal import SCRATCH, read_progress
from ..store.folder.lock import check_free
from ..store.folder.manifest import MANIFEST, entry_stem, picture_name
from ..store.folder.outdir import REPORT_FOLDER, REPORT_PAGE, progress_text
from ..store.folder.reader import Capture, read_manifest
from ..store.folder.summary import collect
from ..store.formats.stats import KEYS
from .analyses import analyses
from .page import html
from .records import InputRow, Report, Section

INDEX, FOLDER = REPORT_PAGE, REPORT_FOLDER
THUMBNAILS = 48  # the first inputs get a thumbnail; the rest are listed
THUMBNAIL_SIDE = 160
LISTED = 500  # inputs listed in the table; manifest.json has them all


def build(out: Path, *, max_channels: int = 64) -> Report:
    """Write ``OUT/index.html`` and ``OUT/report/`` for the finished capture in ``out``, replacing the
    earlier report hookdump wrote there (a user's file in the way is refused before any work); raise
    InputError for a folder that holds no finished capture."""
    check_free(out)  # a capture writing here now: refused, naming it
    banner = _check(out)
    capture = Capture(out)
    elsewhere = "copy the capture elsewhere (cp -r) and report there"
    with claims.claim(out, [INDEX, FOLDER + "/"], "report", "OUT", elsewhere) as writing:
        rows, notes = collect(out)
        manifest = capture.manifest
        scratch = writing.stage_folder(FOLDER)
        files = _files(manifest)
        sections = [_section(row, capture.entries[row["name"]], files[row["name"]]) for row in rows]
        try:
            for section in sections:
                notes += _draw(out, section, scratch, max_channels)
            inputs = _inputs(capture.inputs, manifest, scratch / "inputs")
        except OSError as exc:
            raise from_environment(exc) or UsageError(
                f"Cannot write the report into `{out}`: {exc}", f"Make the folder writable, or {elsewhere}."
            ) from exc
        missing = [i for i in inputs if i.no_thumbnail.startswith("not found")]
        if missing:
            notes.append(
                f"{len(missing)} input photo(s) are no longer where the capture read them: no thumbnail"
            )
        digest = sha256(out / MANIFEST)
        compares, tops, unread = analyses(out, digest, list(capture))
        report = Report(
            out / INDEX, out / FOLDER, sections, inputs, banner, notes + unread + [banner] * bool(banner),
            compares, tops,
        )  # fmt: skip
        page = html(report, manifest, _when(out), digest)
        # a file name that is not UTF-8: `?`
        writing.stage(INDEX, lambda tmp: tmp.write_text(page, encoding="utf-8", errors="replace"))
        writing.commit()
    return report


def _check(out: Path) -> str:
    """Refuse an unfinished capture (with the fix); a banner when an interrupted rerun sits beside a
    finished capture (the page then shows the finished one, which is what the folder holds)."""
    manifest, progress = read_manifest(out), read_progress(out)
    finished = manifest is not None and manifest.get("complete", True) is True
    if progress is None:
        return ""
    if not finished:
        raise InputError(
            f"`{out}` holds an interrupted capture ({progress_text(progress)}), not a finished one.",
            "Finish it first: rerun the same `hookdump capture` command with --resume, then report.",
        )
    return (
        f"An interrupted capture waits in {SCRATCH} ({progress_text(progress)}): this page shows the"
        " finished capture it has not replaced (yet). Finish that run with --resume and report again."
    )


def _files(manifest: dict[str, Any]) -> dict[str, list[str]]:
    """Tensor name -> every file that holds it (one per format)."""
    files: dict[str, list[str]] = {}
    for entry in manifest.get("tensors") or []:
        if isinstance(entry, dict):
            names = files.setdefault(entry_stem(entry), [])
            if entry["file"] not in names:
                names.append(str(entry["file"]))
    return files


def _section(row: dict[str, Any], entry: dict[str, Any], files: list[str]) -> Section:
    return Section(
        name=row["name"], layer=str(entry.get("layer")), kind=str(entry.get("kind", "output")),
        index=entry.get("index"), call=int(entry.get("call") or 0), shape=list(row["shape"]),
        dtype=str(row["dtype"]), files=files, stats={k: row[k] for k in KEYS},
    )  # fmt: skip


def _draw(out: Path, section: Section, scratch: Path, max_channels: int) -> list[str]:
    """The tensor's channel grid into the scratch folder (``report/<name>.png`` once swapped in), or why
    there is none; the notes ``show`` had."""
    if not section.shape or section.shape[0] == 0:
        section.no_picture = "The tensor holds no image."
        return []
    name = picture_name(section.name)
    try:
        file = out / section.files[0]  # the file itself: no capture folder read again for each tensor
        key = section.name if file.suffix in (".safetensors", ".zarr") else None
        rendered = draw.picture(file, scratch / name, key=key, max_channels=max_channels)
    except InputError as exc:  # a vector, a shape with no map: said on the page
        section.no_picture = exc.message
        return []
    section.picture, section.width, section.height = f"{FOLDER}/{name}", rendered.width, rendered.height
    return list(rendered.notes)


def _inputs(records: list[dict[str, Any]], manifest: dict[str, Any], folder: Path) -> list[InputRow]:
    """The inputs as table rows, the first ``THUMBNAILS`` photos with a thumbnail in ``folder``."""
    rows: list[InputRow] = []
    cwd = Path(str(manifest.get("cwd") or "."))
    for number, record in enumerate(records[:LISTED]):
        if not isinstance(record, dict):
            continue
        if record.get("random"):
            label = (
                f"seeded random input (seed {record.get('seed')}, shape {tuple(record.get('shape') or ())})"
            )
            rows.append(InputRow(number, label, None, None, no_thumbnail="random pixels, no photo"))
            continue
        row = InputRow(number, str(record.get("path")), record.get("sha256"), record.get("size"))
        if number < THUMBNAILS:
            _thumbnail(row, cwd / str(record.get("path")), folder)
        else:
            row.no_thumbnail = f"thumbnails for the first {THUMBNAILS} inputs only"
        rows.append(row)
    return rows


def _thumbnail(row: InputRow, path: Path, folder: Path) -> None:
    """A JPEG thumbnail of the photo, when it is still there and still the same bytes."""
    if not exists(path):
        row.no_thumbnail = f"not found at {path}"
        return
    if row.sha256 and digest(path) != row.sha256:
        row.no_thumbnail = "the file has changed since the capture (another sha256)"
        return
    try:
        image = open_image(path)
    except InputError as exc:
        row.no_thumbnail = exc.message
        return
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    folder.mkdir(exist_ok=True)
    image.save(folder / f"{row.number}.jpg", format="JPEG", quality=85)
    row.thumbnail, row.width, row.height = f"{FOLDER}/inputs/{row.number}.jpg", image.width, image.height


def _when(out: Path) -> str:
    """When the capture was finished: manifest.json's time, written last."""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime((out / MANIFEST).stat().st_mtime))
