"""The resume journal: what an interrupted capture keeps in its scratch folder ``OUT/.hookdump-partial``
so that ``--resume`` continues it: the run's record (``run.json``: options, inputs), the checkpoint after
every batch that reached the disk (``progress.json``: counts, streams, recorder state), each batch's input
records and classes, a line each (``inputs.jsonl``, ``classes.txt``), read back and checked: same run, same
inputs, every stream's file holding the rows its checkpoint counts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InputError, UsageError
from ...inputs import forks
from ...inputs.images import digest as input_digest
from ..formats.npy import HEADER_BYTES, itemsize
from .manifest import MANIFEST, inside

SCRATCH = ".hookdump-partial"
PROGRESS = "progress.json"  # after each batch: counts, streams, recorder state
#: The options that change no byte of what a capture writes (where it goes, how it runs): a resumed run and
#: the shards of one run may differ in them.
NO_BYTE_CHANGED = ("out", "workers", "max_queue_mb")
RUN = "run.json"  # once: the options and the inputs, for --resume to compare
CLASSES = "classes.txt"  # with --grad: each batch's classes, a line each
JOURNAL = "commit.json"  # the final moves, decided (``commit``): what a rerun finishes
INPUTS = "inputs.jsonl"  # each batch's inputs' records (path, sha256...), a line each: --resume checks


def committing(out: Path) -> str | None:
    """``pending``: a capture was stopped in its final moves (``commit.finish`` completes them); ``done``:
    after them, its manifest in place, only its scratch folder left; None: neither."""
    if not (out / SCRATCH / JOURNAL).is_file():
        return None
    return "pending" if (out / SCRATCH / MANIFEST).is_file() else "done"


def read_progress(out: Path) -> dict[str, Any] | None:
    """How far an interrupted capture got (with its options and inputs), or None when there is none (a
    scratch folder left after the final moves holds none)."""
    state = committing(out)
    try:
        progress = json.loads((out / SCRATCH / PROGRESS).read_text())
        run = json.loads((out / SCRATCH / RUN).read_text())
    except (OSError, ValueError):
        return None
    if state == "done" or not isinstance(progress, dict) or not isinstance(run, dict):
        return None
    return {**run, **progress, "committing": state == "pending"}


def check_same_run(progress: dict[str, Any], options: dict[str, Any], inputs: list[str]) -> None:
    """``--resume`` continues the same run: same options (``NO_BYTE_CHANGED`` aside), same inputs."""
    free = NO_BYTE_CHANGED
    before = {k: v for k, v in progress.get("options", {}).items() if k not in free}
    now = {k: v for k, v in options.items() if k not in free}
    changed = [k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]
    if changed:
        diff = "; ".join(f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in changed)
        raise UsageError(
            f"--resume continues a capture made with other options ({diff}).",
            "Resume with the options it was started with (its manifest or progress.json lists them), or"
            " pass --overwrite to start again with these.",
        )
    old = progress.get("inputs", [])
    if old != inputs:
        first = next((i for i, (a, b) in enumerate(zip(old, inputs, strict=False)) if a != b), None)
        where = (
            f"row {first}: `{old[first]}` then, `{inputs[first]}` now"
            if first is not None
            else f"{len(old)} inputs then, {len(inputs)} now"
        )
        raise UsageError(
            f"--resume continues a capture of other inputs ({where}).",
            "Resume with the same inputs, or pass --overwrite to start again.",
        )


def read_inputs(out: Path, batches: int | None = None) -> list[dict[str, Any]]:
    """The records of the inputs of the first ``batches`` batches (None: all), as they were read (an earlier
    hookdump kept ``[path, sha256]`` alone: those come back as such records)."""
    try:
        lines = (out / SCRATCH / INPUTS).read_text().splitlines()[:batches]
        rows = [json.loads(line) for line in lines]
    except (OSError, ValueError):  # a capture of hookdump 0.1, or none: nothing recorded to compare
        return []
    return [
        item if isinstance(item, dict) else {"path": str(item[0]), "sha256": str(item[1])}
        for batch in rows
        if isinstance(batch, list)
        for item in batch
    ]


def check_inputs_unchanged(out: Path, progress: dict[str, Any]) -> list[dict[str, Any]]:
    """``--resume``: each input whose rows are already on disk still holds what was read then (its sha256),
    so the finished files are all of today's inputs. Only those inputs are hashed again (spread over the
    cores, ``forks``); their records are returned (each decoded then, the same bytes now: no header of
    theirs needs checking again)."""
    options = progress.get("options") or {}
    image_key = options.get("image_key") or options.get("image_column")  # the inputs' image member or column

    def unchanged(record: dict[str, Any]) -> None:
        path, digest = record["path"], record["sha256"]
        try:
            now = input_digest(path, image_key)
        except OSError as exc:
            now = f"unreadable ({exc.strerror or exc})"
        if now != digest:
            what = f"sha256 {digest[:12]}... then, {now[:12]}... now" if len(now) == 64 else now
            raise InputError(
                f"Input `{path}` changed since the interrupted capture in `{out}` read it ({what}): the"
                " rows already captured from it would not match it.",
                "Put the original file back and rerun with --resume, or rerun with --overwrite to capture"
                " every input again.",
            )

    records = read_inputs(out, int(progress.get("batches", 0)))
    for _, exc in forks.failures(records, unchanged, first_only=True):
        raise exc
    return records


def check_holds(folder: Path, name: str, state: dict[str, Any]) -> tuple[Path, int]:
    """The file of the stream ``state`` describes and its bytes (header and rows), after checking that the
    file holds them all: a file cut short (a power cut before its blocks reached the disk) is refused,
    never padded with zeros."""
    path = inside(folder, state["file"], "progress.json")
    item = itemsize(state["dtype"])
    row_bytes = int(np.prod(state["trailing"], dtype=np.int64)) * item
    rows = int(state["rows"])
    size = HEADER_BYTES + rows * row_bytes
    try:
        held = path.stat().st_size
    except FileNotFoundError:
        held = -1
    if held < size:
        kept = max(held - HEADER_BYTES, 0) // max(row_bytes, 1)
        what = "is missing" if held < 0 else f"holds {kept} of them"
        raise InputError(
            f"The interrupted capture in `{folder.parent}` lost data: its checkpoint counts {rows} row(s) of"
            f" `{name}`, and their file `{path}` {what} (a power cut or a failing disk cut it short).",
            "Rerun with --overwrite to capture it again (or choose another --out).",
        )
    return path, size


def append_line(path: Path, line: str) -> None:
    """Append ``line`` to ``path``, durably (before the checkpoint that counts it)."""
    with path.open("a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def keep_lines(path: Path, count: int) -> list[str]:
    """Cut ``path`` to its first ``count`` lines (a file of one line per batch), returned; [] if absent."""
    if not path.exists():
        return []
    kept = path.read_text().splitlines()[:count]
    path.write_text("".join(f"{line}\n" for line in kept))
    return kept
