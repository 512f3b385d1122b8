"""``manifest.json``, the file every capture folder is read by: its name, the tensor and picture names it
lists, the paths it may name (never outside the folder), and the manifest of an interrupted capture. What a
finished capture's header says (versions, model, weights, transform, options) is made by
:mod:`hookdump.capture.header`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...version import __version__
from .captured import file_stem

MANIFEST = "manifest.json"
SCHEMA_VERSION = 2


def inside(folder: Path, name: object, listed_in: str = MANIFEST) -> Path:
    """``folder / name`` for a file name that ``listed_in`` (manifest.json, progress.json) gives; an
    InputError when the name would lead out of ``folder`` (a `/`, `..`, an absolute path, NUL): hookdump
    reads and writes only inside the folder it was given, whatever a hand-edited file says."""
    text = str(name)
    if text in ("", ".", "..") or "/" in text or "\0" in text:
        raise InputError(
            f"`{folder / listed_in}` lists the file `{text}`, which is not a file in `{folder}`: hookdump"
            " reads and writes only inside that folder.",
            "The file was edited or damaged: capture again (hookdump capture ... --overwrite).",
        )
    return folder / text


def below(folder: Path, name: object, listed_in: str) -> Path:
    """``folder / name`` for a relative path (``report/3.png``) that ``listed_in`` gives, each of its parts
    a name :func:`inside` takes."""
    parts = str(name).split("/")
    for part in parts:
        inside(folder, part, listed_in)
    return folder.joinpath(*parts)


def entry_stem(entry: dict[str, Any]) -> str:
    """A ``tensors`` entry's tensor name: the safetensors key, else the file name without its suffix (or
    the array's name in ``tensors.zarr``), with the ``:`` of an op value."""
    if entry.get("format") == "safetensors":
        return str(entry["key"])
    if entry.get("format") == "zarr":
        stem = str(entry["key"])
    else:
        stem = str(entry["file"]).removesuffix("." + str(entry["format"]))
    layer = str(entry.get("layer", ""))
    safe = file_stem(layer)
    return layer + stem[len(safe) :] if safe != layer and stem.startswith(safe) else stem


#: The name ``show --rollout`` gives its picture in a capture folder (``picture_name(ROLLOUT, ...)``).
ROLLOUT = "rollout"


def picture_name(stem: str, image: int | None = None, suffix: str = "") -> str:
    """The PNG ``show`` draws of tensor ``stem`` (file-safe: ``/`` in a safetensors key becomes ``_``):
    image ``image`` of the batch when given (``.img<i>``), ``suffix`` ``.overlay`` / ``.gradcam`` for a
    heat map."""
    return f"{file_stem(stem).replace('/', '_')}{'' if image is None else f'.img{image}'}{suffix}.png"


def resume_advice(overwrite: bool) -> str:
    """How to go on after an interrupted capture; a run given --overwrite continues without it (--resume
    with --overwrite is refused)."""
    if overwrite:
        return (
            "rerun the same command with --resume in place of --overwrite to continue (or as it was, to"
            " start again)"
        )
    return "rerun the same command with --resume to continue (or --overwrite to start again)"


def incomplete(
    options: dict[str, Any], images_done: int, images_total: int, advice: str | None = None
) -> dict[str, Any]:
    """The manifest of an interrupted capture: it says so, how far it got, and how to go on."""
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": False,
        "hookdump_version": __version__,
        "cwd": os.getcwd(),
        "progress": {"images_done": images_done, "images_total": images_total},
        "resume": advice or resume_advice(False),
        "options": options,
        "tensors": [],
    }
