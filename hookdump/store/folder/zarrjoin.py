"""The ``tensors.zarr`` of a run's parts (``--shard`` folders, torchrun's ranks) joined into one store
without a pass through ``.npy``: the whole run's arrays created once (``create``), each part's rows written
into the chunks wholly its own by whoever holds the part (``write_part``: a rank its own, ``merge`` each in
turn), then the few chunks that straddle two parts, the stats of all and the metadata (``finish``). Every
chunk is written once, whole, as one process writes it: the store is that process's, byte for byte."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..formats import zarr as zarr_format
from ..formats.stats import Accumulator
from ..formats.zarr import ZARR_STORE, ZarrArray
from .manifest import entry_stem
from .reader import Capture

NEEDS = "Zarr stores (--format zarr)"


@dataclass
class Join:
    """The arrays of the joined store, the tensor each holds (its key in a ``Capture``) and, per array, the
    first row of each part and the rows in all (``starts[a][-1]``); a chunk holds ``chunk_inputs`` inputs."""

    arrays: list[ZarrArray]
    stems: list[str]
    starts: list[list[int]]
    chunk_inputs: int

    def owned(self, a: int, part: int) -> tuple[int, int]:
        """The rows ``[first, last)`` of array ``a`` in chunks that hold rows of ``part`` alone (none: an
        empty range): the part's rows less those in a chunk it shares with the part before or after."""
        lo, hi, total = self.starts[a][part], self.starts[a][part + 1], self.starts[a][-1]
        rows = self.arrays[a].chunk_rows(self.chunk_inputs)
        first = -(-lo // rows) * rows
        last = hi if hi == total else hi // rows * rows
        return (first, last) if first < last else (lo, lo)

    def shared(self, a: int) -> list[tuple[int, int]]:
        """The rows of each chunk of array ``a`` that holds rows of two parts or more."""
        rows, total = self.arrays[a].chunk_rows(self.chunk_inputs), self.starts[a][-1]
        chunks = sorted({b // rows for b in self.starts[a][1:-1] if b % rows and 0 < b < total})
        return [(k * rows, min((k + 1) * rows, total)) for k in chunks]


def plan(captures: list[Capture], chunk_inputs: int) -> Join:
    """The joined store of ``captures`` (the parts in order, each with a ``tensors.zarr``)."""
    entries = [e for e in captures[0].manifest["tensors"] if e.get("format") == "zarr"]
    groups = [zarr_format.open_group(c.path / ZARR_STORE, NEEDS) for c in captures]
    arrays, starts = [], []
    for entry in entries:
        first = groups[0][entry["key"]]
        rows = [int(g[entry["key"]].shape[0]) for g in groups]
        starts.append([int(n) for n in np.cumsum([0, *rows])])
        per_input = int((entry.get("windows") or {}).get("per_image", 1))
        shape = (starts[-1][-1], *(int(n) for n in first.shape[1:]))
        attributes = dict(first.attrs)
        arrays.append(
            ZarrArray(entry["key"], shape, np.dtype(first.dtype), entry.get("layout"), per_input, attributes)
        )
    return Join(arrays, [entry_stem(e) for e in entries], starts, chunk_inputs)


def create(join: Join, store: Path, captures: list[Capture]) -> None:
    """The joined store's group and arrays, no chunk of them written yet, and the inputs' coordinates."""
    first = captures[0].manifest
    attributes = {"hookdump_version": first.get("hookdump_version"), "model": first.get("model")}
    inputs = [record for capture in captures for record in capture.inputs]
    zarr_format.create(store, join.arrays, join.chunk_inputs, attributes, inputs)


def write_part(join: Join, store: Path, part: int, capture: Capture) -> list[dict[str, Any]]:
    """Rows of ``part`` (read from its ``capture``) into the chunks wholly its own; the stats of all its rows
    (an ``Accumulator``'s state per array, for ``finish``)."""
    group = zarr_format.require(NEEDS).open_group(store, mode="r+", zarr_format=3)
    states = []
    for a, (array, stem) in enumerate(zip(join.arrays, join.stems, strict=True)):
        source, offset = capture[stem], join.starts[a][part]
        first, last = join.owned(a, part)
        acc = Accumulator()
        for lo, hi in ((offset, first), (last, join.starts[a][part + 1])):  # rows in a shared chunk
            if lo < hi:
                acc.update(np.asarray(source[lo - offset : hi - offset]))
        if first < last:
            zarr_format.copy_rows(group[array.name], source, first, last, offset, seen=acc.update)
        states.append(acc.state())
    return states


def finish(join: Join, store: Path, captures: list[Capture], states: list[list[dict[str, Any]]]) -> list[Any]:
    """After every part's ``write_part`` (``states``: theirs, in part order): the chunks the parts share,
    written from the parts' rows; the metadata consolidated; the stats of each array over all its rows."""
    group = zarr_format.require(NEEDS).open_group(store, mode="r+", zarr_format=3)
    stats = []
    for a, (array, stem) in enumerate(zip(join.arrays, join.stems, strict=True)):
        starts = join.starts[a]
        for lo, hi in join.shared(a):
            pieces = [
                np.asarray(c[stem][max(lo, s) - s : min(hi, e) - s])
                for c, s, e in zip(captures, starts, starts[1:], strict=False)
                if s < hi and e > lo
            ]
            group[array.name][lo:hi] = np.concatenate(pieces)
        total = Accumulator()
        for part in states:
            total.add(Accumulator.from_state(part[a]))
        stats.append(total.result())
    zarr_format.consolidate(group.store)
    return stats
