"""--format zarr through a capture's life: killed after two batches and resumed, killed in its final moves
(also while it replaces an older tensors.zarr), split by --shard I/N and merged, and run as two ranks of
torch.distributed started by hand (no torchrun): tensors.zarr is each time the bytes of one uninterrupted
process's, chunk files and metadata alike."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
import zarr
from common import free_port
from slow_runs import mixed_photos

ARGS = ("-m", "test_resnet", "-l", "conv1", "-l", "layer1", "--batch-size", "2", "--format", "zarr")


def hd(*args: object, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """The console script (forked); ``kill_at``: SIGKILLed there (``HOOKDUMP_TEST_KILL_AT``)."""
    done = forkrun.run(args, env={**os.environ, "HOOKDUMP_TEST_KILL_AT": kill_at or ""})
    if kill_at is not None:
        assert done.returncode == -signal.SIGKILL, done.stderr
    return done


def _store(out: Path) -> dict[str, bytes]:
    """Every file of ``out``'s tensors.zarr by its path in the store."""
    root = out / "tensors.zarr"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _same_store(out: Path, whole: Path) -> None:
    """``out``'s tensors.zarr holds ``whole``'s arrays, decoded and as bytes, and nothing of a run is left."""
    ours, theirs = (zarr.open_group(o / "tensors.zarr", mode="r") for o in (out, whole))
    assert sorted(ours.array_keys()) == sorted(theirs.array_keys())
    for name in theirs.array_keys():
        assert (
            np.ascontiguousarray(ours[name][:]).tobytes() == np.ascontiguousarray(theirs[name][:]).tobytes()
        )
    assert _store(out) == _store(whole)  # Blosc's output is the same for the same rows
    entries = [json.loads((o / "manifest.json").read_text())["tensors"] for o in (out, whole)]
    assert entries[0] == entries[1]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Seven photos and their uninterrupted capture, in batches of 2 (so chunks of 2 inputs)."""
    root = tmp_path_factory.mktemp("whole")
    photos = mixed_photos(root / "photos", 7)
    done = hd("capture", *ARGS, photos, "-o", root / "out", "-q")
    assert done.returncode == 0, done.stderr
    # two arrays of 4 chunks, two coordinates of one (the inputs' path and sha256), each with its zarr.json
    assert len(_store(root / "out")) == 2 * (4 + 1) + 2 * (1 + 1) + 1
    return photos, root / "out"


@pytest.fixture(scope="module")
def by_threes(tmp_path_factory: pytest.TempPathFactory, whole: tuple[Path, Path]) -> tuple[Path, Path]:
    """The same photos captured with --zarr-chunk 3: chunks that straddle the shards' whole batches of 2."""
    out = tmp_path_factory.mktemp("threes") / "out"
    done = hd("capture", *ARGS, "--zarr-chunk", "3", whole[0], "-o", out, "-q")
    assert done.returncode == 0, done.stderr
    return whole[0], out


CHUNKS = pytest.mark.parametrize(
    "chunk", [(), ("--zarr-chunk", "3")], ids=["chunks of a batch", "chunks across the parts"]
)


def _reference(request: pytest.FixtureRequest, chunk: tuple[str, ...]) -> tuple[Path, Path]:
    return request.getfixturevalue("by_threes" if chunk else "whole")  # type: ignore[no-any-return]


def test_a_capture_killed_after_two_batches_resumes_to_the_same_store(
    tmp_path: Path, whole: tuple[Path, Path]
) -> None:
    photos, out = whole[0], tmp_path / "out"
    hd("capture", *ARGS, photos, "-o", out, kill_at="checkpoint-2")
    assert not (out / "tensors.zarr").exists()  # written at the commit, from the streams
    done = hd("capture", *ARGS, photos, "-o", out, "--resume")
    assert done.returncode == 0, done.stderr
    assert "resumed after 4 of 7 images" in done.stderr
    _same_store(out, whole[1])


@pytest.mark.parametrize("over", [False, True], ids=["into a new folder", "over an older tensors.zarr"])
def test_a_kill_in_the_final_moves_is_finished_by_the_next_run(
    tmp_path: Path, whole: tuple[Path, Path], over: bool
) -> None:
    photos, out = whole[0], tmp_path / "out"
    extra = ("--overwrite",) if over else ()
    if over:
        assert hd("capture", *ARGS, photos, "-o", out, "--seed", "1", "-q").returncode == 0
    hd("capture", *ARGS, photos, "-o", out, *extra, kill_at="commit-moves")
    assert (out / ".hookdump-partial" / "tensors.zarr").is_dir()  # inputs.parquet moved, the store not yet
    assert (out / "tensors.zarr").is_dir() == over and not (out / "manifest.json").exists()
    done = hd("capture", *ARGS, photos, "-o", out, "--resume")
    assert done.returncode == 0, done.stderr
    assert "finished moving the files of the capture interrupted" in done.stderr
    _same_store(out, whole[1])  # the older store set aside whole, and gone with the scratch folder


@CHUNKS
def test_shards_merged_give_the_store_of_one_process(
    tmp_path: Path, request: pytest.FixtureRequest, chunk: tuple[str, ...]
) -> None:
    """Shards of 2, 2 and 3 photos; in chunks of 3 the first two own no chunk: merge writes them all."""
    photos, whole = _reference(request, chunk)
    shards = [tmp_path / f"s{i}" for i in range(3)]
    for i, shard in enumerate(shards):
        done = hd("capture", *ARGS, *chunk, photos, "-o", shard, "--shard", f"{i}/3", "-q")
        assert done.returncode == 0, done.stderr
    assert [zarr.open_group(s / "tensors.zarr", mode="r")["conv1"].shape[0] for s in shards] == [2, 2, 3]
    merged = hd("merge", *reversed(shards), "-o", tmp_path / "merged")
    assert merged.returncode == 0, merged.stderr
    _same_store(tmp_path / "merged", whole)


@CHUNKS
def test_two_ranks_started_by_hand_give_the_store_of_one_process(
    tmp_path: Path, short_tmp: Path, request: pytest.FixtureRequest, chunk: tuple[str, ...]
) -> None:
    """torch.distributed's environment set by hand, as a job scheduler would (no torchrun): each rank
    captures its shard and writes its rows into the chunks of tensors.zarr wholly its own, rank 0 the chunk
    they share (rows 3..6 in chunks of 3) and the rest of the capture."""
    (photos, whole), out = _reference(request, chunk), tmp_path / "ranks"
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    base |= {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "TMPDIR": str(short_tmp),
    }
    command = ["capture", *ARGS, *chunk, photos, "-o", out, "--device", "cpu", "--workers", "0"]
    ranks = [forkrun.start(command, env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    ended = [rank.communicate(timeout=600) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], ended
    assert ended[0][0].count("wrote ") == 1 and "wrote " not in ended[1][0]  # rank 0 alone reports
    _same_store(out, whole)
