"""tensors.zarr joined from a run's parts: which chunks each part writes (every chunk once, whole, by a part
that holds all its rows, or after the parts when two share it), checked against the chunk grid counted out
by hand; one part's ``write_part`` writes its own chunk files and no other's; the parts' stats added up are
those of one accumulator over all the rows."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from hookdump.store.folder.zarrjoin import Join
from hookdump.store.formats.stats import Accumulator
from hookdump.store.formats.zarr import ZarrArray


def _join(parts: list[int], chunk: int, per_input: int = 1) -> Join:
    starts = [int(n) * per_input for n in np.cumsum([0, *parts])]
    array = ZarrArray("t", (starts[-1], 3), np.dtype("float32"), None, per_input, {})
    return Join([array], ["t"], [starts], chunk)


@pytest.mark.parametrize("seed", range(40))
def test_every_chunk_is_written_once_by_a_part_that_holds_all_its_rows_or_after_the_parts(seed: int) -> None:
    rng = random.Random(seed)
    parts = [rng.randint(0, 9) for _ in range(rng.randint(1, 5))]
    if not sum(parts):
        parts[0] = 1
    chunk, per_input = rng.randint(1, 6), rng.choice([1, 1, 4])
    join = _join(parts, chunk, per_input)
    rows, total = chunk * per_input, sum(parts) * per_input
    owner = [i for i, n in enumerate(parts) for _ in range(n * per_input)]  # each row's part, by hand
    written: list[int] = []  # chunk indexes, as often as something writes them
    for part in range(len(parts)):
        first, last = join.owned(0, part)
        assert first % rows == 0 or first == last
        assert last % rows == 0 or last == total or first == last
        for k in range(first // rows, -(-last // rows)) if first < last else []:
            assert {owner[r] for r in range(k * rows, min((k + 1) * rows, total))} == {part}
            written.append(k)
    for lo, hi in join.shared(0):
        assert lo % rows == 0 and hi == min(lo + rows, total)
        assert len({owner[r] for r in range(lo, hi)}) >= 2
        written.append(lo // rows)
    assert sorted(written) == list(range(-(-total // rows)))


def test_one_part_writes_its_own_chunk_files_and_no_other(tmp_path: Path) -> None:
    from hookdump.store.folder import zarrjoin
    from hookdump.store.formats import zarr as zarr_format

    join = _join([4, 4, 3], 2)  # chunks of 2: part 1 holds rows 4..8, chunks 2 and 3
    store = tmp_path / "t.zarr"
    zarr_format.create(store, join.arrays, join.chunk_inputs, {})
    rows = np.arange(11 * 3, dtype=np.float32).reshape(11, 3)

    class Part:  # what write_part reads of a part: its rows by tensor name
        def __getitem__(self, name: str) -> np.ndarray:
            return rows[4:8]

    states = zarrjoin.write_part(join, store, 1, Part())  # type: ignore[arg-type]
    assert sorted(p.name for p in (store / "t").glob("c.*")) == ["c.2.0", "c.3.0"]
    import zarr

    assert np.array_equal(zarr.open_array(store / "t", mode="r")[4:8], rows[4:8])
    alone = Accumulator()
    alone.update(rows[4:8])
    assert Accumulator.from_state(states[0]).result() == alone.result()


def test_stats_added_up_over_parts_are_those_of_all_the_rows_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((37, 1000)) * 10 ** rng.uniform(-3, 3, (37, 1))).astype(np.float32)
    rows[5, 7], rows[20, 0], rows[30, 3] = np.nan, np.inf, 0.0
    whole = Accumulator()
    whole.update(rows)
    total = Accumulator()
    for lo, hi in [(0, 3), (3, 3), (3, 19), (19, 37)]:
        part = Accumulator()
        part.update(rows[lo:hi])
        total.add(Accumulator.from_state(part.state()))
    assert total.result() == whole.result()
    finite = rows[np.isfinite(rows)].astype(np.float64)
    assert total.result()["mean"] == pytest.approx(finite.mean(), rel=1e-12)
