"""The record of what hookdump wrote in a folder, ``.hookdump-files.json`` (beside a capture's manifest):
each file's name, the command that wrote it, its size, mtime and sha256, so that a later command replaces
it only while it is still what hookdump wrote (:mod:`claims` decides; this module reads and writes it)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...digest import sha256

RECORD = ".hookdump-files.json"  # the files hookdump wrote in a folder, beside a capture's manifest
KIND = "hookdump_files"


def read(folder: Path) -> dict[str, dict[str, Any]]:
    """The files the folder's record lists (name -> size, sha256), or {} (no record, or not hookdump's)."""
    try:
        data = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and KIND in data else None
    return {str(k): v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}


def recorded(folder: Path) -> list[str]:
    """The names the folder's record lists that are there, as hookdump wrote them."""
    return [name for name, entry in read(folder).items() if _unchanged(folder / name, entry)]


def _unchanged(path: Path, entry: dict[str, Any]) -> bool:
    """Whether ``path`` is the file the record describes (a name recorded before its file came: yes)."""
    if not path.is_file() or path.is_symlink():
        return False
    if entry.get("size") is None:  # recorded, then killed before the rename: the name is hookdump's
        return True
    stat = path.stat()
    if stat.st_size != entry["size"]:
        return False
    return (stat.st_mtime_ns == entry.get("mtime_ns")) or sha256(path) == entry.get("sha256")


def why(folder: Path, name: str) -> str:
    """Why a file in the way is not hookdump's to replace: no record names it, or it changed since."""
    if name in read(folder):
        return "a file hookdump wrote there, changed since"
    return "and no hookdump record there says hookdump wrote it"


@contextlib.contextmanager
def edit(folder: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The folder's record, to change in the block; written whole (a rename) at its end, under a kernel lock
    on the folder (two commands side by side); no record at all once it lists nothing."""
    with _folder_locked(folder):
        files = read(folder)
        yield files
        text = json.dumps({KIND: 1, "files": dict(sorted(files.items()))}, indent=1) + "\n"
        tmp = folder / f".{RECORD}.{os.getpid()}.tmp"
        if not files:  # nothing of hookdump's left: no record either
            (folder / RECORD).unlink(missing_ok=True)
            return
        tmp.write_text(text)
        os.replace(tmp, folder / RECORD)


def describe(path: Path, command: str) -> dict[str, Any]:
    stat = path.stat()
    return {
        "command": command, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256(path),
        "written": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stat.st_mtime)),
    }  # fmt: skip


@contextlib.contextmanager
def _folder_locked(folder: Path) -> Iterator[None]:
    """Hold a kernel lock on the folder itself while its record changes (two commands side by side)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
