"""Captured tensors to ``.npy`` / ``.pt`` / ``.safetensors`` files and ``manifest.json``, all or nothing."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

from ...errors import Interrupted
from ...failures import DISK_FULL, disk_full
from ..formats.npy import HEADER_BYTES
from . import commit, inputrows, inputtable, journal, outdir, profile
from .captured import Captured
from .journal import CLASSES, INPUTS, PROGRESS, RUN, SCRATCH
from .lock import OutputLock
from .manifest import MANIFEST
from .reader import read_manifest
from .saved import Adopted, SavedTensor
from .streams import Streams


class Writer:
    """Streams each batch's tensors into ``OUT/.hookdump-partial``; ``commit`` moves the files in place and
    writes the manifest last. ``checkpoint`` records after each batch how far the run got, so that an
    interrupted run (``suspend``: Ctrl-C, SIGTERM; or SIGKILL, which leaves the last checkpoint) can be
    continued with ``resume``. Leaving the ``with`` block on an error removes the scratch folder (and ``out``
    when this writer created it): no half-written output; a resumed run keeps it, at its last checkpoint.
    """

    def __init__(
        self,
        out: Path,
        formats: tuple[str, ...],
        save_dtype: str = "float32",
        overwrite: bool = False,
        resume: bool = False,
        shard_bytes: int | None = None,
        needed: int | None = None,
        command: str = "capture",
        planned: tuple[dict[str, Any] | None, list[dict[str, Any]]] = (None, []),
        zarr_rows: int = 1,
    ) -> None:
        self.out = out
        # --resume: the progress and the journal's records as the plan read them (before this run held the
        # folder's lock): the records are taken when the progress read under the lock is the same
        self.planned = planned
        self.command = command  # who writes (``merge`` too), as a refusal names it
        self.needed = needed  # bytes the capture writes in all (``budget.total``), for a full disk's message
        self.formats = formats
        self.overwrite = overwrite
        self.resume = resume
        self.shard_bytes = shard_bytes
        self.scratch = out / SCRATCH
        self.tensors = Streams(self.scratch, formats, save_dtype, zarr_rows)  # each captured tensor's stream
        self.notes: list[str] = []
        self.resumed: dict[str, Any] | None = None  # the progress continued from, with --resume
        self.images_done = 0  # images the last checkpoint covers (what an interrupted run keeps)
        self.committed = False  # the files and the manifest are in place
        self._keep_scratch = False
        self.records: list[dict[str, Any]] = []  # each input's record (its sha256...) as its batch landed
        self.table: inputrows.Rows | None = None  # inputs.parquet, written as the batches land
        self.commit_notes: list[str] = []  # what the commit says (the inputs' records kept in the manifest)

    def __enter__(self) -> Writer:
        """Create ``out``, lock it (one capture at a time), then continue or clear its scratch folder."""
        self._created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        self.lock = OutputLock(self.out)
        try:
            self.lock.acquire()
            state = journal.committing(self.out)
            if state is not None:  # a run killed in its final moves (or just after): finished first
                commit.finish(self.out)
                if state == "pending":
                    self.notes.append(f"finished moving the files of the capture interrupted in {self.out}")
                if state == "pending" and self.resume:
                    self.committed = True  # nothing left to do: the caller reads the manifest
                    return self
            outdir.check(self.out, self.overwrite, self.resume)  # again, now that no other run writes here
            if self.resume and outdir.nothing_written(self.out):
                self.resume = False  # the preflight said so (``outdir.starts_again``): from the first batch
            if self.resume:
                self._reopen()
            else:
                self._clear_scratch()
                self.scratch.mkdir()
                commit.kill_at("opened")
        except BaseException:
            self.__exit__()
            raise
        return self

    def _clear_scratch(self) -> None:
        """Without --resume, what an earlier run left in the scratch folder goes (it was refused above unless
        --overwrite was given, or it holds no batch at all)."""
        old = [self.scratch, *self.out.glob(f"{SCRATCH}-*")]  # the second: scratch of hookdump 0.1
        gone = [p for p in old if p.is_dir()]
        for folder in gone:
            shutil.rmtree(folder)
        if gone:
            self.notes.append(
                f"removed {len(gone)} scratch folder(s) left in {self.out} by an interrupted capture"
            )

    def _reopen(self) -> None:
        self._keep_scratch = True  # the interrupted run's: kept, whatever fails here
        self.resumed = journal.read_progress(self.out)
        assert self.resumed is not None, "outdir.check makes sure"
        as_planned = self.planned[0] == self.resumed  # nothing written since the plan read it
        self.images_done = int(self.resumed.get("images", 0))
        self.tensors.reopen(self.resumed["streams"])
        batches = self.resumed["batches"]  # a batch written but not checkpointed is done again: its lines go
        kept = journal.keep_lines(self.scratch / CLASSES, batches)
        self.resumed["classes"] = [int(c) for line in kept for c in line.split()]
        with profile.span("records"):
            journal.keep_lines(self.scratch / INPUTS, batches)
            self.records = list(self.planned[1]) if as_planned else journal.read_inputs(self.out, batches)

    def __exit__(self, *exc: object) -> None:
        self.tensors.close()
        if self.table is not None:
            with contextlib.suppress(OSError):  # a full disk must not keep the scratch folder from going
                self.table.discard()
        if not self._keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.lock.release()
        if self._created and self.out.is_dir() and not any(self.out.iterdir()):
            self.out.rmdir()
        error = exc[1] if len(exc) > 1 else None
        if isinstance(error, OSError) and error.errno in DISK_FULL:
            kept = (
                "Rerun with --resume once there is room." if self._keep_scratch else "Nothing of it was kept."
            )
            raise disk_full(f"the capture into `{self.out}`", kept, self._on_disk()) from error

    def _on_disk(self) -> int | None:
        """About what the capture takes on disk: its tensors' bytes, and each file's header and last block."""
        if self.needed is None:
            return None
        try:
            block = os.statvfs(self.out).f_frsize
        except OSError:
            block = 4096
        return self.needed + max(len(self.tensors.files), 1) * len(self.formats) * (HEADER_BYTES + block)

    def start(self, run: dict[str, Any], inputs: list[str] | None = None) -> None:
        """What stays the same for the whole run (options, the inputs), written once, for --resume; the
        inputs' table started (``inputs``: their paths; None, a random input: no table)."""
        if self.resumed is None:
            commit.write_json(self.scratch / RUN, run)
            commit.kill_at("started")
        if inputs is None:
            return
        with profile.span("records"):
            kept = inputrows.kept_in_manifest(inputs)
            if kept is not None:
                self.commit_notes.append(kept)
            elif all("mode" in r for r in self.records):  # (else a journal of sha256 alone: at commit)
                so_far = functools.partial(journal.read_inputs, self.out)  # every record so far
                self.table = inputrows.Rows(self.scratch / inputtable.TABLE, so_far)
                self.table.add(self.records)  # an interrupted run's table has no footer: written again

    def checkpoint(self, progress: dict[str, Any], classes: list[int], inputs: list[dict[str, Any]]) -> None:
        """After a batch reached the files: record it (``progress``: counts, recorder state; the records of
        the batch's ``inputs`` (their sha256...), and its classes with --grad, are appended to files of their
        own, so no checkpoint grows with the dataset; the records to the inputs' table too)."""
        start = profile.clock()
        with profile.span("records"):
            self.records.extend(inputs)
            journal.append_line(self.scratch / INPUTS, json.dumps(inputs, separators=(",", ":")))
            if self.table is not None:
                self.table.add(inputs)
        if classes:
            journal.append_line(self.scratch / CLASSES, " ".join(map(str, classes)))
        streams = self.tensors.states()
        commit.write_json(self.scratch / PROGRESS, {**progress, "streams": streams}, durable=True)
        self.images_done = int(progress.get("images", 0))
        profile.add("checkpoint", start)
        commit.kill_at(f"checkpoint-{progress.get('batches')}")

    @property
    def kept(self) -> bool:
        """Whether the scratch folder stays when this writer closes (for --resume)."""
        return self._keep_scratch

    def suspend(self, manifest: dict[str, Any]) -> None:
        """Interrupted: keep the scratch folder for --resume, and say so in ``manifest.json`` unless the
        folder holds a finished capture (which an interrupted --overwrite must not damage)."""
        self._keep_scratch = (self.scratch / PROGRESS).exists()
        if self._keep_scratch and read_manifest(self.out) is None:
            commit.write_json(self.out / MANIFEST, manifest)

    def commit(
        self, entries: list[Captured], header: dict[str, Any], adopted: Adopted | None = None
    ) -> list[SavedTensor]:
        """Name the files, write the other formats from the streams (never holding a whole tensor), move
        everything into ``out`` (``adopted``'s files too), manifest last."""
        saved, moves = self.tensors.save(entries, self.shard_bytes, header)
        if adopted is not None:
            saved, moves = adopted.arranged(saved), {**moves, **adopted.moves}
        header = dict(header)
        records = header.get("inputs")
        if isinstance(records, list) and records and not any(r.get("random") for r in records):
            # (the table written as the batches landed was allowed at start: the names are not checked again)
            names = None if self.table is not None else [str(r.get("path")) for r in records]
            kept = None if names is None else inputrows.kept_in_manifest(names)
            if kept is None:  # the inputs' records beside the tensors, the manifest keeps a count
                header["inputs"] = self._table(records)
                moves[inputtable.TABLE] = inputtable.TABLE
            elif kept not in self.commit_notes:
                self.commit_notes.append(kept)
        header["notes"] = [*header.get("notes", []), *self.commit_notes]
        self._keep_scratch = True  # from here on, every batch is kept whatever happens
        commit.check_free(self.out, list(moves.values()), self.command)
        with commit.signals_held() as came:  # a kill from here on leaves a state a rerun finishes
            commit.stage(self.out, moves, {**header, "tensors": [s.as_dict() for s in saved]})
            commit.kill_at("commit-staged")
            commit.finish(self.out)
            self._keep_scratch, self.committed = False, True
        if came:
            raise Interrupted(128 + came[0], f"the capture had finished: `{self.out}` holds it, complete.")
        return saved

    def _table(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The inputs' table, finished (the one written as the batches landed when it holds ``records``;
        else written now, as ``merge`` does); what the manifest keeps of it."""
        with profile.span("records"):
            path = self.scratch / inputtable.TABLE
            if self.table is not None and self.table.rows == len(records):
                return self.table.close()
            if self.table is not None:
                self.table.discard()
            return inputrows.write(path, records)
