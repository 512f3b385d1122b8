"""A capture on object storage read back, and what a reader command writes beside it. Every reader
(``hookdump.open``, ``stats``, ``show``, ``diff``, ``compare``, ``top``, ``report``, ``merge``) reads a local
copy: the folder's manifest and every object it lists, fetched into the input cache many at a time and kept
while their size and ETag stay the same (``inputs/fetch.py``), so a memory map of a ``.npy`` works as on a
local disk. ``report`` builds its page in that copy and uploads it beside the capture, each file put over
one hookdump wrote or only where nothing is."""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import InputError
from ...inputs import fetch
from ...urls import filesystem, is_url, join, plain
from . import remote
from .lease import Lease, read_object
from .manifest import MANIFEST
from .record import RECORD


def local(text: str | Path) -> Path:
    """A reader's folder or file: a local path as it is; a URL as its local copy (``local_copy`` of a
    capture folder; a tensor file, ``.npy`` / ``.pt`` / ``.safetensors``, fetched alone)."""
    if not is_url(str(text)):
        return Path(plain(str(text)))
    if str(text).lower().endswith((".npy", ".pt", ".safetensors")):
        return fetch.fetch(fetch.expand(str(text), "tensor file"))[0]
    return local_copy(str(text))


def local_copy(url: str) -> Path:
    """The finished capture at ``url`` as a local folder: its manifest and every object it lists (those of
    a store it names, ``tensors.zarr/...``, too), and what the folder's record lists (a report's files).
    A folder with no manifest is an InputError, as a local one is."""
    fs, path = filesystem(url)
    text = read_object(fs, url, join(path, MANIFEST), "input")
    if text is None:
        raise InputError(
            f"`{url}` holds no {MANIFEST}: it is not a finished hookdump capture (or not yet published).",
            "Pass the --out URL of a `hookdump capture` run that finished.",
        )
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise InputError(f"`{join(url, MANIFEST)}` is not readable JSON: {exc}", "Capture again.") from exc
    there = remote.listing(url, "input")
    record = read_object(fs, url, join(path, RECORD), "input")
    names = remote.owned(manifest, there, json.loads(record) if record else None)
    fetch.fetch([(join(url, name), there[name]) for name in sorted(names) if name in there])
    return fetch.cached(url)


def upload(folder: Path, url: str, names: list[str]) -> None:
    """Put ``names`` (files of the local copy ``folder``, a reader's output beside the capture) at ``url``,
    the folder's record last: each over an object hookdump's records there list, else only where nothing
    is (a user's object at that name is refused, naming it). Under the folder's lease."""
    fs, path = filesystem(url, "out")
    there = remote.listing(url)
    record = read_object(fs, url, join(path, RECORD))
    ours = remote.owned(remote.manifest_of(url), there, json.loads(record) if record else None)
    with Lease(url):
        for name in [*names, RECORD]:
            if (folder / name).is_file():
                remote.put(
                    fs, join(url, name), folder / name, join(path, name), name in ours or name == RECORD
                )
