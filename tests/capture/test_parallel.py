"""One capture spread out: --shard I/N folders joined by merge, and 2 CPU ranks under torchrun, each giving
the single-process files byte for byte."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from common import SKIMAGE_DATA, inputs_of, torchrun
from slow_runs import mixed_photos

ARGS = (
    "-m",
    "test_resnet",
    "-l",
    "conv1",
    "-l",
    "layer1",
    "--batch-size",
    "3",
    "--format",
    "npy,pt,safetensors",
)
FILES = ("conv1.npy", "layer1.npy", "conv1.pt", "layer1.pt", "tensors.safetensors")


def _same_files(a: Path, b: Path) -> None:
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    inputs = [inputs_of(d) for d in (a, b)]
    assert inputs[0] == inputs[1]


@pytest.fixture
def single(cli, tmp_path: Path) -> tuple[Path, Path]:
    photos, out = mixed_photos(tmp_path / "photos", 10), tmp_path / "single"
    assert cli("capture", *ARGS, photos, "-o", out).exit_code == 0
    return photos, out


def test_shards_merged_equal_one_process(cli, tmp_path: Path, single: tuple[Path, Path]) -> None:
    photos, whole = single
    shards = [tmp_path / f"s{i}" for i in range(3)]
    for i, folder in enumerate(shards):
        result = cli("capture", *ARGS, photos, "-o", folder, "--shard", f"{i}/3")
        assert result.exit_code == 0, result.stderr
    rows = [json.loads((s / "manifest.json").read_text())["shard"]["rows"] for s in shards]
    assert rows == [3, 3, 4]  # 4 batches of 3 (the last of 1), split on batch boundaries
    merged = cli("merge", *reversed(shards), "-o", tmp_path / "merged")
    assert merged.exit_code == 0, merged.stderr
    assert "merged 3 shard(s), 10 input(s)" in merged.stdout
    _same_files(whole, tmp_path / "merged")
    # refused: a missing shard, a repeated one, a shard of another run, a folder that is no shard
    missing = cli("merge", shards[0], shards[2], "-o", tmp_path / "m1")
    assert missing.exit_code == 4 and "Shards missing: 1/3" in missing.stderr
    twice = cli("merge", shards[0], shards[0], shards[1], shards[2], "-o", tmp_path / "m2")
    assert twice.exit_code == 4 and "Shard 0/3 is given twice" in twice.stderr
    other = tmp_path / "other"
    assert cli("capture", *ARGS, photos, "-o", other, "--shard", "1/3", "--seed", "1").exit_code == 0
    mixed = cli("merge", shards[0], other, shards[2], "-o", tmp_path / "m3")
    assert mixed.exit_code == 4 and "different runs" in mixed.stderr
    plain = cli("merge", whole, "-o", tmp_path / "m4")
    assert plain.exit_code == 4 and "is not a shard of a capture" in plain.stderr
    for bad in ("3/3", "1/0", "x"):
        result = cli("capture", *ARGS, photos, "-o", tmp_path / "bad", "--shard", bad)
        assert result.exit_code == 2 and "is not I/N" in result.stderr


def test_two_cpu_ranks_under_torchrun_equal_one_process(
    tmp_path: Path, short_tmp: Path, single: tuple[Path, Path]
) -> None:
    photos, whole = single
    out = tmp_path / "ranks"
    # each rank a fresh `python -m hookdump`, as a user's torchrun starts it (other torchrun tests fork them)
    command, env = torchrun(["capture", *ARGS, photos, "-o", out], short_tmp, forked=False)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote ") == 1  # rank 0 alone reports
    _same_files(whole, out)
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "inputs.parquet", "manifest.json"])


def test_a_failing_rank_fails_the_run_with_its_message(tmp_path: Path, short_tmp: Path) -> None:
    photos = mixed_photos(tmp_path / "photos", 6)
    (photos / "p05.png").unlink()
    whole = (SKIMAGE_DATA / "rocket.jpg").read_bytes()
    (photos / "p05.jpg").write_bytes(whole[: len(whole) // 3])  # a header that reads, pixels that do not
    command, env = torchrun(["capture", *ARGS, photos, "-o", tmp_path / "o"], short_tmp)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode != 0
    assert "rank 1: " in proc.stderr and "p05.jpg` is not an image hookdump can read" in proc.stderr
    assert not (tmp_path / "o").exists()
