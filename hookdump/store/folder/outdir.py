"""The output folder: what it holds (nothing, a finished capture, an interrupted one), and whether this run
may write there (``--overwrite``, ``--resume``). An interrupted capture is its scratch folder
``OUT/.hookdump-partial`` with ``progress.json``, written after every batch that reached the disk."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ...errors import InputError, UsageError
from ..formats.zarr import ZARR_STORE
from . import claims, record
from .captured import file_stem
from .claims import check_folder
from .journal import PROGRESS, SCRATCH, committing, read_progress
from .manifest import MANIFEST
from .reader import read_manifest

REPORT_PAGE, REPORT_FOLDER = "index.html", "report"  # ``hookdump report``: the page and its pictures


def foreign_manifest(out: Path) -> str | None:
    """Why ``OUT/manifest.json`` is not a hookdump manifest (someone else's, or damaged), or None when it
    is one or there is none: hookdump never replaces such a file."""
    if not (out / MANIFEST).is_file():
        return None
    data = read_manifest(out)
    if data is None:
        return "it is not a JSON object"
    if not {"hookdump_version", "schema_version"} <= set(data):
        return "it has no hookdump_version and schema_version"
    return None


def written(layers: list[str], formats: tuple[str, ...], pictures: bool = False) -> str:
    """A regular expression of the names a capture of ``layers`` writes in its folder (each layer's files,
    the safetensors files, the folder ``tensors.zarr``, with ``pictures`` the PNGs ``--png`` draws, the
    inputs' table)."""
    suffix = r"(@\d+)?(\.in\d+|\.attn|\.out\d+)?(\.grad)?"
    named = "|".join(re.escape(file_stem(layer)) + suffix for layer in layers)
    kinds = [f for f in formats if f not in ("safetensors", "zarr")]
    pattern = [rf"(?:{named})\.(?:{'|'.join(kinds)})"] if named and kinds else []
    if pictures and layers:  # the names ``manifest.picture_name`` gives
        drawn = "|".join(re.escape(file_stem(layer).replace("/", "_")) + suffix for layer in layers)
        pattern.append(rf"(?:{drawn})(\.img\d+)?(\.overlay|\.gradcam)?\.png")
    if "safetensors" in formats:
        pattern.append(r"tensors(-\d+-of-\d+)?\.safetensors|tensors\.safetensors\.index\.json")
    if "zarr" in formats:
        pattern.append(re.escape(ZARR_STORE))  # a folder: a user's, even empty, is refused
    pattern.append(re.escape("inputs.parquet"))  # the inputs' table (store/folder/inputtable.py)
    return "|".join(pattern)


def in_the_way(
    out: Path,
    layers: list[str],
    formats: tuple[str, ...],
    ours: list[str],
    pictures: bool = False,
    command: str = "capture",
) -> None:
    """Refuse, before any work, a file in ``out`` that this capture would write (``written``) and that
    ``ours`` (what the folder's hookdump records list: ``commit.owned``) does not name: it is not
    hookdump's to replace. Other files (photos, notes) are no business of the capture."""
    pattern, mine = written(layers, formats, pictures), set(ours)
    try:
        names = sorted(os.listdir(out))
    except OSError:  # not there yet, or not a folder (refused by check)
        return
    for name in names:
        if name not in mine and re.fullmatch(pattern, name):
            claims.refuse(out / name, command, "choose another --out", record.why(out, name))


def check(out: Path, overwrite: bool, resume: bool) -> None:
    """Refuse, before any work, a folder this run may not write: a file, an unwritable place, a finished
    capture (without ``--overwrite``), an interrupted one (without ``--resume`` or ``--overwrite``)."""
    check_folder(out, "--out")
    if overwrite and resume:
        raise UsageError("--overwrite starts again, --resume continues: not both.", "Keep one of them.")
    foreign = foreign_manifest(out)
    if foreign is not None:
        raise UsageError(
            f"`{out / MANIFEST}` is not a hookdump manifest ({foreign}): a capture there would replace it.",
            "Move it away (it is not hookdump's to remove), or choose another --out.",
        )
    manifest, progress = read_manifest(out), read_progress(out)
    finished = manifest is not None and manifest.get("complete", True) is not False
    if resume and progress is None and not finished and nothing_written(out):
        return  # killed before its first batch reached the disk: --resume starts from the first
    if resume and progress is None:
        why = (
            "its capture is finished"
            if finished
            else f"it holds no interrupted capture ({SCRATCH}/{PROGRESS})"
        )
        raise UsageError(
            f"Nothing to resume in `{out}`: {why}.", "Drop --resume (and pass --overwrite to redo it)."
        )
    if progress is not None and not (resume or overwrite):
        raise UsageError(
            f"`{out}` holds an interrupted capture ({progress_text(progress)}).",
            "Rerun the same command with --resume to continue it, or with --overwrite to start again.",
        )
    if finished and not (overwrite or resume):
        raise UsageError(
            f"`{out}` already holds a capture ({MANIFEST}).",
            "Pass --overwrite to replace it, or choose another --out.",
        )


def nothing_written(out: Path) -> bool:
    """Whether ``out`` holds a capture stopped (``kill -9``) before its first batch reached the disk: its
    scratch folder holds no checkpoint (the run's record ``run.json`` at most, or nothing: stopped while
    the model loaded)."""
    scratch = out / SCRATCH
    return scratch.is_dir() and not (scratch / PROGRESS).exists() and committing(out) is None


def starts_again(out: Path) -> str:
    """The note of a ``--resume`` that finds only what ``nothing_written`` recognises."""
    return f"--resume: the capture interrupted in {out} had written no batch yet: it starts from the first"


def progress_text(progress: dict[str, Any]) -> str:
    """``64 of 256 images done``."""
    done = f"{progress.get('images', 0)} of {progress.get('total', '?')} images done"
    return f"{done}, stopped while moving its files into place" if progress.get("committing") else done


#: The longest layer name a file may carry: file systems allow 255 bytes, and hookdump adds suffixes
#: (``@12``, ``.out3``, ``.grad``, ``.png``...) to it.
MAX_NAME_BYTES = 200


def check_file_names(layers: list[str], formats: tuple[str, ...]) -> None:
    """Refuse, before any work, a layer whose name cannot be a file name in ``--out``: ``.npy`` and ``.pt``
    files are named after the layer, so a plugin's module name with a `/` (or NUL), one too long, or two
    equal but for case (one file on macOS and Windows) would write elsewhere, fail, or collide."""
    files = [f for f in formats if f != "safetensors"]
    if not files:
        return
    kind = "a tensors.zarr array" if files[0] == "zarr" else f"a .{files[0]} file"
    fix = "Use --format safetensors (its keys may be any string), or rename the module in the model's code."
    folded: dict[str, str] = {}
    for name in layers:
        if "/" in name or "\0" in name:
            what = "a `/`" if "/" in name else "a NUL character"
            raise InputError(f"Layer `{name}` has {what} in its name, so it cannot name {kind}.", fix)
        if len(name.encode()) > MAX_NAME_BYTES:
            raise InputError(
                f"Layer `{name[:40]}...` has a name of {len(name.encode())} bytes, too long for {kind}"
                f" name (at most {MAX_NAME_BYTES}).",
                fix,
            )
        other = folded.setdefault(file_stem(name).casefold(), name)
        if other != name:
            raise InputError(
                f"Layers `{other}` and `{name}` differ only in case: their .{files[0]} files would be one"
                " file on a case-insensitive file system (macOS, Windows).",
                "Use --format safetensors (its keys keep case), or capture them in separate runs.",
            )
