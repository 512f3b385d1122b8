"""A run's captured tensors in the scratch folder: each streamed to a ``.npy`` of its own as the batches
land, saved as ``--save-dtype`` says, with its stats (of the saved values); their state for a checkpoint
and a resumed run; at the end, the other formats written from them (``saved``)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..formats.choices import check_save_dtype, for_saving
from ..formats.npystream import NpyStream
from ..formats.stats import Accumulator, nonfinite_notes
from . import commit, journal, profile
from .captured import Captured, Key, key_from_json
from .saved import SavedTensor, dtype_name, saved_files


class Streams:
    """The streams of one run, by the key of the tensor each holds (layer, kind, index, call)."""

    def __init__(self, scratch: Path, formats: tuple[str, ...], save_dtype: str, zarr_rows: int = 1) -> None:
        self.scratch = scratch
        self.formats = formats
        self.save_dtype = save_dtype
        self.zarr_rows = zarr_rows  # the inputs in a chunk of tensors.zarr
        # Streams that only become .npy files are not read back by this run: they bypass the page cache.
        self.direct = not {"pt", "safetensors", "zarr"} & set(formats)
        self.files: dict[Key, NpyStream] = {}
        self.source_dtypes: dict[Key, torch.dtype] = {}
        self.stats: dict[Key, Accumulator | None] = {}  # None: resumed from a run that kept none
        self._synced = 0  # streams whose file names were made durable

    def reopen(self, states: list[dict[str, Any]]) -> None:
        """Continue the streams an interrupted run's checkpoint lists, each file checked to hold the rows the
        checkpoint counts (all checked before any is touched)."""
        held = [journal.check_holds(self.scratch, key_from_json(s["key"])[0], s) for s in states]
        for state, (path, size) in zip(states, held, strict=True):
            key = key_from_json(state["key"])
            self.files[key] = NpyStream.reopen(path, key[0], state, size, self.direct)
            self.source_dtypes[key] = getattr(torch, state["source_dtype"])
            kept = state.get("stats")
            self.stats[key] = Accumulator.from_state(kept) if isinstance(kept, dict) else None
        self._synced = len(self.files)

    def append(
        self, batch: dict[Key, torch.Tensor], made_as: Mapping[Key, torch.dtype] | None = None
    ) -> None:
        """Add one forward pass's tensors, each to its own stream, and to its stats (of the saved values);
        ``made_as``: the dtype the model made a tensor in, where its copy was converted already."""
        for key, tensor in batch.items():
            if key not in self.files:  # a stream keeps its first dtype: one check is enough
                made = (made_as or {}).get(key, tensor.dtype)
                check_save_dtype(self.save_dtype, self.formats, {made})
                self.files[key] = NpyStream(
                    self.scratch / f"stream-{len(self.files)}.npy", key[0], self.direct
                )
                self.source_dtypes[key] = made
                self.stats[key] = Accumulator()
            start = profile.clock()
            saved = for_saving(tensor, self.save_dtype)
            self.files[key].append(saved)
            start = profile.add("write", start)
            acc = self.stats[key]
            if acc is not None:
                acc.update(saved)
            profile.add("stats", start)

    def states(self) -> list[dict[str, Any]]:
        """Each stream's state for a checkpoint, once what it counts is on the disk (new files' names too)."""
        states = []
        for key, stream in self.files.items():
            stream.sync()  # what the checkpoint counts is on the disk before the checkpoint is
            acc = self.stats[key]
            states.append(
                {
                    "key": list(key), **stream.state(), "source_dtype": dtype_name(self.source_dtypes[key]),
                    "stats": None if acc is None else acc.state(),
                }
            )  # fmt: skip
        if len(self.files) > self._synced:  # new files: their names reach the disk too
            commit.sync_folder(self.scratch)
            self._synced = len(self.files)
        return states

    def bytes_written(self) -> int:
        """What the streams hold so far."""
        return sum(s.path.stat().st_size for s in self.files.values() if s.path.exists())

    def nonfinite_notes(self, entries: list[Captured]) -> list[str]:
        """A note for each tensor that holds NaN or Inf, naming it."""
        return nonfinite_notes((item.stem, item.kind, self.stats.get(item.key)) for item in entries)

    def save(
        self, entries: list[Captured], shard_bytes: int | None, header: dict[str, Any] | None = None
    ) -> tuple[list[SavedTensor], dict[str, str]]:
        """Close the streams of ``entries`` and write the other formats from them (never holding a whole
        tensor; ``header``: the manifest's, for ``tensors.zarr``): each file's manifest entry, and the moves
        (scratch name -> name in ``OUT``)."""
        streams = [self.files[item.key] for item in entries]
        for stream in streams:
            stream.close()
        stats = {item.key: self._result(item.key) for item in entries}
        return saved_files(
            entries, streams, self.source_dtypes, stats, self.formats, self.scratch, shard_bytes,
            self.zarr_rows, header,
        )  # fmt: skip

    def close(self) -> None:
        """Close every stream; a full disk must not keep the scratch folder from going."""
        for stream in self.files.values():
            with contextlib.suppress(OSError):
                stream.close()

    def _result(self, key: Key) -> dict[str, Any] | None:
        acc = self.stats.get(key)
        return None if acc is None else acc.result()
