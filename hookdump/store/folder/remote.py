"""A capture folder on object storage (``--out s3://bucket/acts``). An object store has no rename and no
lock, so the run writes a local copy of the folder first, the mirror (``$HOOKDUMP_CACHE/out/<digest of the
URL>``), with every promise a local folder keeps (the lock, the resume journal, the commit), and publishes it
once it is whole: each file uploaded under its name, the manifest last (a reader goes by it: no manifest, no
capture). A lease object stands for the lock (its holder, host and expiry); what hookdump may replace is
read from the bucket's listing and its manifest before any write, and each name no hookdump record lists
is put only if nothing is there (a conditional put). A publish cut short (the network, a kill) is finished
by the same command with ``--resume``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from ...errors import HookdumpError, UsageError
from ...urls import cache, call, filesystem, join
from .lease import Lease, read_object
from .manifest import MANIFEST
from .record import RECORD

PUBLISH = ".hookdump-publish.json"  # in the mirror: what the publish uploads (and what is ours to replace)


def mirror(url: str | Path) -> Path:
    """The local copy a capture into ``url`` is written to before it is published."""
    digest = hashlib.sha256(str(url).rstrip("/").encode()).hexdigest()[:20]
    return cache() / "out" / digest


def listing(url: str, role: str = "out") -> dict[str, dict[str, Any]]:
    """Every object under the folder ``url``, by its name inside it, with what the listing says of it."""
    fs, path = filesystem(url, role)
    fs.invalidate_cache(path)  # (fsspec keeps listings: this run's own puts are not in an old one)
    try:
        found = call(url, lambda: fs.find(path, detail=True), role, "list")
    except HookdumpError as exc:
        if "does not exist" in exc.message and "bucket" not in exc.message:
            return {}
        raise
    prefix = path.rstrip("/") + "/"
    return {str(k)[len(prefix) :]: dict(v) for k, v in found.items() if str(k).startswith(prefix)}


def manifest_of(url: str, role: str = "out") -> dict[str, Any] | None:
    """The folder's ``manifest.json`` (a hookdump one or not), or None when there is none."""
    fs, path = filesystem(url, role)
    text = read_object(fs, url, join(path, MANIFEST), role)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def owned(manifest: dict[str, Any] | None, names: dict[str, Any], record: Any = None) -> set[str]:
    """What of the folder hookdump's records list as its own: a hookdump manifest's tensor files (and every
    object under a store it names, ``tensors.zarr/...``), its inputs' table, the manifest itself; and what
    the folder's ``record`` (``.hookdump-files.json``, as read) lists (``report``'s files, ``show``'s)."""
    listed = set((record or {}).get("files") or {}) if isinstance(record, dict) else set()
    mine = {n for n in names if n in listed} | ({RECORD} if listed else set())
    if not manifest or "hookdump_version" not in manifest:
        return mine
    files = {str(e.get("file")) for e in manifest.get("tensors") or [] if isinstance(e, dict)}
    table = (manifest.get("inputs") or {}).get("table") if isinstance(manifest.get("inputs"), dict) else None
    files |= {str(table)} if table else set()
    return {n for n in names if n in files or n.split("/", 1)[0] in files} | {MANIFEST} | mine


def pending(folder: Path) -> bool:
    """Whether the mirror holds a finished capture not yet published (the publish cut short)."""
    try:
        return json.loads((folder / MANIFEST).read_text()).get("complete", True) is True
    except (OSError, ValueError, AttributeError):
        return False


def check(url: str, overwrite: bool, resume: bool, lease: bool = True) -> None:
    """Refuse, before any work, a folder on the bucket this run may not write: a manifest that is not
    hookdump's, a finished capture without ``--overwrite``, another run's lease; and a finished capture of
    this machine's that a cut-short publish left in the mirror, unless ``--resume`` publishes it or
    ``--overwrite`` captures again."""
    found = manifest_of(url)
    if found is not None and "hookdump_version" not in found:
        raise UsageError(
            f"`{join(url, MANIFEST)}` is not a hookdump manifest: a capture there would replace it.",
            "Move it away (it is not hookdump's to remove), or choose another --out.",
        )
    if pending(mirror(url)) and not (resume or overwrite):
        raise UsageError(
            f"`{url}`: an earlier run's capture into it is finished but was not all uploaded (the network or"
            " the run stopped while it published).",
            "Rerun the same command with --resume to publish it, or with --overwrite to capture again.",
        )
    if found is not None and found.get("complete", True) and not overwrite and not resume:
        raise UsageError(
            f"`{url}` already holds a capture ({MANIFEST}).",
            "Pass --overwrite to replace it, or choose another --out.",
        )
    if lease:  # (under torchrun, rank 0 alone: it holds the lease for them all)
        Lease(url).check()


def in_the_way(url: str, pattern: str) -> None:
    """Refuse, before any work, an object whose name this capture writes (``pattern``, ``outdir.written``)
    and that no hookdump record there lists (a user's)."""
    there = listing(url)
    ours = owned(manifest_of(url), there)
    for name in there:
        if name not in ours and re.fullmatch(pattern, name.split("/", 1)[0]):
            raise UsageError(
                f"`{join(url, name)}` is in the way: hookdump capture would write an object of that name, and"
                " no hookdump record there says hookdump wrote it (hookdump replaces only its own files).",
                "Move it away, or choose another --out.",
            )


def publish(folder: Path, url: str) -> list[str]:
    """Upload the finished capture in ``folder`` (the mirror) to ``url``: the old capture's files that the
    new one does not write removed (its manifest first, so the folder never claims a mixed capture), each
    file put (a name no hookdump record lists only if nothing is there), the manifest last; then the mirror
    goes. Idempotent: a publish cut short is done again from its journal. Returns the names uploaded."""
    fs, path = filesystem(url, "out")
    journal = folder / PUBLISH
    names = sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*")
        if p.is_file() and p.name not in (MANIFEST, PUBLISH) and not p.name.startswith(".hookdump")
    )  # fmt: skip
    if journal.is_file():
        state = json.loads(journal.read_text())
    else:
        there = listing(url)
        old = owned(manifest_of(url), there)
        state = {"files": names, "remove": sorted(old - set(names) - {MANIFEST}), "replace": sorted(old)}
        journal.write_text(json.dumps(state))
    mine = set(state["replace"]) | set(state["files"])  # (an object put by the cut-short publish is ours)
    for name in [MANIFEST, *state["remove"]] if MANIFEST in state["replace"] else state["remove"]:
        _remove(fs, url, join(path, name))
    for name in [*names, MANIFEST]:
        put(fs, join(url, name), folder / name, join(path, name), name in mine)
    journal.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    return [*names, MANIFEST]


def publish_kept(folder: Path, url: str) -> Path:
    """``publish`` the capture in ``folder``, keeping a copy of its manifest beside the mirror (which goes):
    what a command says it wrote."""
    kept = folder.with_name(folder.name + "." + MANIFEST)
    shutil.copyfile(folder / MANIFEST, kept)
    publish(folder, url)
    return kept


def _remove(fs: Any, url: str, target: str) -> None:
    """One of hookdump's old objects removed (nothing when it is gone already)."""

    def work() -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(target)

    call(url, work, "out", "write")


def put(fs: Any, url: str, source: Path, target: str, ours: bool) -> None:
    """One file uploaded to ``url``: over an object hookdump wrote, or only where nothing is (a conditional
    put, ``mode="create"``)."""
    data = source.read_bytes()
    try:
        call(url, lambda: fs.pipe_file(target, data, mode="overwrite" if ours else "create"), "out", "write")
    except UsageError as exc:
        if "FileExistsError" not in exc.message:
            raise
        raise UsageError(
            f"`{url}` is in the way: an object of that name was put there while hookdump wrote this folder,"
            " and no hookdump record says hookdump wrote it (hookdump replaces only its own files).",
            "Move it away and rerun the same command with --resume: the capture is kept.",
        ) from exc
