"""The last step of a capture, moving its files from the scratch folder into ``OUT``, made safe to stop.

Everything is first staged whole in ``OUT/.hookdump-partial``: the tensor files under their final names and
the new ``manifest.json``; then a journal (``commit.json``) lists the moves and the old capture's files to
remove. From then on the commit is decided and :func:`finish` carries it out, and carries it out again,
idempotently, after a ``kill -9`` anywhere: the old manifest goes first (the folder then says it is
unfinished), then the old files, then the moves, the new manifest last (a rename), then the scratch folder.
A folder (``tensors.zarr``) moves whole, by one rename, the old one set aside into the scratch folder first.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ..formats.safetensors import SAFETENSORS_FILE, SAFETENSORS_INDEX
from . import claims, record
from .journal import JOURNAL, SCRATCH, committing
from .lock import OutputLock
from .manifest import MANIFEST, inside
from .reader import read_manifest


def kill_at(point: str) -> None:
    """Test seam: ``HOOKDUMP_TEST_KILL_AT=point`` SIGKILLs this process there, as a power cut would
    (``opened``: the scratch folder made, the model not yet loaded; ``started``: the run's record written,
    no batch yet; ``checkpoint-N``: after the N-th batch's checkpoint; ``commit-staged``, ``commit-moves``,
    ``commit-done``: in the final moves)."""
    if os.environ.get("HOOKDUMP_TEST_KILL_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def previous_files(out: Path) -> list[str]:
    """What an --overwrite removes of the capture in ``out``: the files its manifest lists, and what the
    folder's record says hookdump drew from them (``show``, ``capture --png``, ``hookdump report``)."""
    old = read_manifest(out)
    if old is None:
        return []
    try:
        files = {str(entry["file"]) for entry in old.get("tensors", [])}
        stores = {str(e["file"]) for e in old.get("tensors", []) if e.get("format") == "zarr"}
    except (KeyError, TypeError, AttributeError):
        files = stores = set()
    if isinstance(old.get("inputs"), dict) and isinstance(old["inputs"].get("table"), str):
        files.add(old["inputs"]["table"])  # the inputs' table
    if any(name != SAFETENSORS_FILE and name.startswith("tensors-") for name in files):
        files.add(SAFETENSORS_INDEX)
    files = {n for n in files if (out / n).parent == out and (out / n).is_file()}
    folders = {
        n for n in stores if (out / n).parent == out and (out / n).is_dir() and not (out / n).is_symlink()
    }
    return sorted(files | folders | set(record.recorded(out)))


def owned(out: Path) -> list[str]:
    """The files in ``out`` that are hookdump's to replace: the capture's (``previous_files``), and those
    an interrupted commit's journal moves or removes (its manifest may already be gone)."""
    try:
        journal = json.loads((out / SCRATCH / JOURNAL).read_text())
        pending = [str(name) for _, name in journal["moves"]] + [str(n) for n in journal["remove"]]
    except (OSError, ValueError, KeyError, TypeError):
        pending = []
    return previous_files(out) + pending


def check_free(out: Path, names: list[str], command: str = "capture") -> None:
    """The files the commit writes replace only hookdump's own (a file put there while ``command`` ran, in
    the way, is refused naming it; a capture's batches stay in the scratch folder, for --resume)."""
    ours = set(previous_files(out))
    for name in names:
        if (out / name).exists() and name not in ours:
            fix = (
                "Move it away and rerun the same command with --resume: every batch is kept."
                if command == "capture"
                else "Move it away and run the same command again, or choose another --out."
            )
            raise UsageError(
                f"`{out / name}` is in the way: a file of that name was put there while hookdump {command}"
                " wrote this folder, and no hookdump record says hookdump wrote it (hookdump replaces only"
                " its own files).",
                fix,
            )


def stage(out: Path, moves: dict[str, str], manifest: dict[str, Any]) -> None:
    """Decide the commit: the staged files (``moves``: scratch name -> name in ``out``) and the manifest
    are on the disk, then the journal that says what :func:`finish` does."""
    scratch = out / SCRATCH
    write_json(scratch / MANIFEST, manifest, durable=True)
    for name in moves:
        _sync_tree(scratch / name)
    remove = [n for n in previous_files(out) if n not in moves.values()]
    sync_folder(scratch)
    write_json(scratch / JOURNAL, {"moves": sorted(moves.items()), "remove": remove}, durable=True)
    sync_folder(scratch)


def finish(out: Path) -> bool:
    """Carry out the journal in ``out``'s scratch folder, where there is one (True), then remove the
    folder. Each step is skipped when already done, so a kill anywhere leaves a state this finishes."""
    scratch = out / SCRATCH
    try:
        journal = json.loads((scratch / JOURNAL).read_text())
    except (OSError, ValueError):
        return False
    if (scratch / MANIFEST).exists():  # not yet in place: the old capture goes, the new one comes
        (out / MANIFEST).unlink(missing_ok=True)
        for name in journal["remove"]:
            _set_aside(out, name)  # a folder (tensors.zarr): out of the way whole, gone with the scratch
        claims.remove(out, journal["remove"], JOURNAL)
        for i, (source, name) in enumerate(journal["moves"]):
            if (scratch / source).exists():
                if (scratch / source).is_dir():
                    _set_aside(out, name)  # the old capture's: a folder is not renamed over another
                os.replace(scratch / source, inside(out, name, JOURNAL))
            if i == 0:
                kill_at("commit-moves")
        sync_folder(out)
        os.replace(scratch / MANIFEST, out / MANIFEST)
        sync_folder(out)
        kill_at("commit-done")
    shutil.rmtree(scratch, ignore_errors=True)
    return True


def _set_aside(out: Path, name: str) -> None:
    """Move the folder ``name`` of ``out`` (not a file) into the scratch folder, whole, by one rename."""
    if "/" in name:  # a file in a subfolder (report/3.png): ``claims.remove``'s
        return
    path = inside(out, name, JOURNAL)
    if path.is_dir() and not path.is_symlink():
        aside = out / SCRATCH / f"old-{name}"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(path, aside)


def clean_finished(out: Path) -> None:
    """Remove the scratch folder (and lock file) a run killed just after its final moves left beside its
    finished capture, unless another run holds the folder."""
    if committing(out) != "done":
        return
    lock = OutputLock(out)
    try:
        lock.acquire()
    except UsageError:
        return
    try:
        finish(out)
    finally:
        lock.release()


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM wait until the block is done; the signals that came are listed (in the main
    thread, where Python runs signal handlers; elsewhere nothing is held)."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    held = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    held = {s: h for s, h in held.items() if h is not signal.SIG_IGN and h is not None}
    for number in held:
        signal.signal(number, lambda signum, frame: came.append(signum))
    try:
        yield came
    finally:
        for number, handler in held.items():
            signal.signal(number, handler)


def write_json(path: Path, data: dict[str, Any], durable: bool = False) -> None:
    """Atomically: a temporary file beside it, then a rename (a reader never sees half a file);
    ``durable``: on the disk before the rename, so a power cut leaves the old file or the new one whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as handle:
        handle.write(json.dumps(data, indent=2) + "\n")
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def sync_folder(folder: Path) -> None:
    """Make the names in ``folder`` (files made or renamed there) durable."""
    _sync_file(folder)


def _sync_tree(path: Path) -> None:
    """``path`` on the disk: a file, or a folder (tensors.zarr) with every file and folder in it."""
    if path.is_dir():
        for inner in sorted(path.rglob("*"), reverse=True):  # files before the folders that name them
            _sync_file(inner)
    _sync_file(path)


def _sync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
