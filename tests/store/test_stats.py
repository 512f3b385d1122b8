"""Numbers at a glance: each tensor's min, max, mean, std, zeros, NaN and Inf, in the manifest, in capture's
summary and from `hookdump stats`, checked against numpy on the saved files; through resume and merge."""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from common import PLUGINS
from slow_runs import SLOW_BY_3, kill_when, mixed_photos, start_run

from hookdump.store.formats.stats import KEYS, PIECE, Accumulator, number, percent

MODEL = ("-m", "test_resnet")
LAYERS = ("-l", "conv1", "-l", "act1", "-l", "layer1.0.act1", "-l", "layer4")
NONFINITE = ("--import", PLUGINS / "nonfinite_plugin.py", "-m", "nonfinite_net", "--input-size", "3,16,16")


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


def _numpy_stats(array: np.ndarray) -> dict[str, Any]:
    """What the manifest should say, by numpy: over the finite values, zeros of all."""
    x = np.asarray(array, dtype=np.float64)
    finite = x[np.isfinite(x)]
    return {
        "min": float(np.min(finite)) if finite.size else None,
        "max": float(np.max(finite)) if finite.size else None,
        "mean": float(np.mean(finite)) if finite.size else None,
        "std": float(np.std(finite)) if finite.size else None,
        "zeros": float(np.count_nonzero(x == 0) / x.size),
        "nan": int(np.isnan(x).sum()),
        "inf": int(np.isinf(x).sum()),
    }


def _close(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert sorted(got) == sorted(KEYS)
    for key in KEYS:
        if want[key] is None or key in ("nan", "inf", "min", "max"):
            assert got[key] == want[key], key  # min and max are values of the tensor: exact
        else:
            assert math.isclose(got[key], want[key], rel_tol=1e-9, abs_tol=1e-12), (key, got[key], want[key])


def _stats_by_stem(out: Path) -> dict[str, dict[str, Any]]:
    return {(e.get("key") or Path(e["file"]).stem): e["stats"] for e in _manifest(out)["tensors"]}


def test_manifest_stats_equal_numpys_on_the_saved_files(cli, photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("capture", *MODEL, *LAYERS, photos, "-o", out, "--batch-size", "2", "--format", "npy,safetensors")
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    entries = _manifest(out)["tensors"]
    assert len(entries) == 8  # four tensors, two formats each, the same stats
    for entry in entries:
        stem = entry.get("key") or Path(entry["file"]).stem
        _close(entry["stats"], _numpy_stats(np.load(out / f"{stem}.npy")))
    stats = _stats_by_stem(out)
    assert stats["act1"]["zeros"] > 0.3 and stats["act1"]["min"] == 0.0  # a ReLU: many zeros
    assert stats["conv1"]["zeros"] < 0.01 and stats["conv1"]["min"] < 0
    # the summary: compact columns, no NaN / Inf when there are none
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("act1.npy"))
    want = stats["act1"]
    assert f"mean {number(want['mean'])}" in line and f"std {number(want['std'])}" in line
    assert f"zeros {percent(want['zeros'])}" in line and "NaN" not in result.stdout
    assert "holds" not in result.stderr


def test_stats_command_table_and_json_agree_with_numpy(cli, photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("capture", *MODEL, *LAYERS, photos, "-o", out).exit_code == 0
    as_json = cli("stats", out, "--json")
    assert as_json.exit_code == 0, as_json.stderr
    rows = json.loads(as_json.stdout)
    assert [r["name"] for r in rows] == ["conv1", "act1", "layer1.0.act1", "layer4"]
    assert as_json.stderr == ""  # read from the manifest: nothing to say
    for row in rows:
        array = np.load(out / f"{row['name']}.npy")
        assert row["shape"] == list(array.shape) and row["dtype"] == "float32" and row["source"] == "manifest"
        _close({k: row[k] for k in KEYS}, _numpy_stats(array))
    text = cli("stats", out)
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["name", "shape", "dtype", "min", "max", "mean", "std", "zeros", "NaN", "Inf"]
    for row, line in zip(rows, lines[1:], strict=True):
        cells = line.split("  ")
        cells = [c.strip() for c in cells if c.strip()]
        assert cells[0] == row["name"] and cells[1] == str(tuple(row["shape"])) and cells[2] == "float32"
        numbers = [number(row[k], 4) for k in ("min", "max", "mean", "std")]
        assert cells[3:] == [*numbers, percent(row["zeros"], 1), "0", "0"]
        assert math.isclose(float(cells[5]), row["mean"], rel_tol=1e-3)


def test_nan_and_inf_are_counted_and_the_layer_named(cli, photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("capture", *NONFINITE, "-l", "conv", "-l", "spoil", "-l", "act", photos, "--batch-size", "2")
    result = cli(*args, "-o", out)
    assert result.exit_code == 0, result.stderr
    # per image: channel 0's first row (16 values) Inf, channel 1's first 3 values NaN; ReLU(-Inf) is 0
    notes = [
        "spoil (output) holds 9 NaN and 48 Inf of 3,072 values",
        "act (output) holds 9 NaN and 45 Inf of 3,072 values",
    ]
    assert [f"note: {n}" for n in notes] == result.stderr.splitlines()[-2:]  # at the end of the capture
    manifest = _manifest(out)
    assert manifest["notes"][-2:] == notes
    assert not any("conv" in n and "holds" in n for n in manifest["notes"])
    for entry in manifest["tensors"]:
        _close(entry["stats"], _numpy_stats(np.load(out / entry["file"])))
    stats = _stats_by_stem(out)
    assert (stats["spoil"]["nan"], stats["spoil"]["inf"], stats["conv"]["nan"]) == (9, 48, 0)
    assert math.isfinite(stats["spoil"]["max"]) and math.isfinite(stats["spoil"]["mean"])
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("spoil.npy"))
    assert line.endswith("NaN 9  Inf 48")
    table = cli("stats", out).stdout.splitlines()
    assert table[2].split()[-2:] == ["9", "48"]


@pytest.mark.parametrize(
    ("formats", "save_dtype"), [("npy", "float32"), ("safetensors", "bfloat16"), ("pt", "keep")]
)
def test_stats_of_a_capture_without_them_are_computed_and_said_so(
    cli, photos: Path, tmp_path: Path, formats: str, save_dtype: str
) -> None:
    out = tmp_path / "out"
    dtype = ("--dtype", "bfloat16") if save_dtype == "keep" else ()
    args = ("capture", *MODEL, *LAYERS, photos, "-o", out, "--format", formats, "--save-dtype", save_dtype)
    assert cli(*args, *dtype).exit_code == 0
    manifest = _manifest(out)
    recorded = _stats_by_stem(out)
    if save_dtype != "float32":  # the saved bfloat16 values, as torch reads them back
        assert {e["dtype"] for e in manifest["tensors"]} == {"bfloat16"}
        import hookdump

        for name, tensor in hookdump.open(out).items():
            _close(recorded[name], _numpy_stats(tensor.float().numpy()))
    for entry in manifest["tensors"]:
        del entry["stats"]  # as a capture made before stats were recorded
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = cli("stats", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert "records no stats for 4 of 4 tensor(s)" in result.stderr
    assert "computed from the files (conv1, act1, layer1.0.act1, ...)" in result.stderr
    rows = json.loads(result.stdout)
    assert {r["source"] for r in rows} == {"files"}
    for row in rows:  # row sums added exactly: the same numbers, however the rows were batched
        assert {k: row[k] for k in KEYS} == recorded[row["name"]]
    text = cli("stats", out)
    assert text.exit_code == 0 and "computed from the files" in text.stderr


def test_accumulator_state_survives_a_json_round_trip_mid_way() -> None:
    """What --resume does: the state after some batches goes to progress.json and comes back."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((10, 3, 7, 5)).astype(np.float32)
    data[data < -1] = 0
    data[2, 0, 0, :2] = np.nan
    data[7, 1, 3, 4] = -np.inf
    one_go = Accumulator()
    one_go.update(torch.from_numpy(data))
    first = Accumulator()
    for start in (0, 3):
        first.update(torch.from_numpy(data[start : start + 3]))
    restored = Accumulator.from_state(json.loads(json.dumps(first.state())))
    for start in (6, 9):
        restored.update(torch.from_numpy(data[start : start + 3]))
    assert restored.result() == one_go.result()  # bit for bit, not just close
    _close(one_go.result(), _numpy_stats(data))
    assert (one_go.nan, one_go.inf, one_go.count) == (2, 1, data.size)
    bf16 = Accumulator()
    bf16.update(torch.from_numpy(data).to(torch.bfloat16))
    _close(bf16.result(), _numpy_stats(torch.from_numpy(data).to(torch.bfloat16).float().numpy()))
    empty = Accumulator()
    empty.update(np.full((2, 3), np.nan, dtype=np.float32))
    assert empty.result() == dict(min=None, max=None, mean=None, std=None, zeros=0.0, nan=6, inf=0)


def test_long_rows_are_summed_the_same_however_they_are_batched() -> None:
    """Rows longer than one float64 piece (``stats.PIECE``), a NaN and an infinity in some rows only: the
    rows of a batch with non-finite values go the slower way, and every batching still gives one result."""
    rng = np.random.default_rng(1)
    data = (rng.standard_normal((6, 3 * PIECE + 17)) * 1000 + 3).astype(np.float32)
    data[data < 0] = 0
    data[1, PIECE + 5] = np.nan
    data[4, 2 * PIECE] = np.inf
    data[5, 7] = -0.0
    results = []
    for size in (1, 2, 4, 6):
        acc = Accumulator()
        for start in range(0, len(data), size):
            acc.update(torch.from_numpy(data[start : start + size]))
        results.append(acc.result())
    assert all(r == results[0] for r in results)  # bit for bit
    _close(results[0], _numpy_stats(data))
    assert (results[0]["nan"], results[0]["inf"]) == (1, 1)
    assert results[0]["zeros"] == np.count_nonzero(data == 0) / data.size


def test_stats_survive_a_resume_after_kill_9(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKDUMP_TEST_SLEEP", "0")  # in this process nothing is stopped; start_run's sleep
    photos = mixed_photos(tmp_path / "photos", 12)
    whole, out = tmp_path / "whole", tmp_path / "out"
    assert cli("capture", *SLOW_BY_3, photos, "-o", whole).exit_code == 0
    run = start_run(["capture", *map(str, SLOW_BY_3), str(photos), "-o", str(out)])
    kill_when(run, out, 3)
    assert run.returncode == -signal.SIGKILL
    progress = json.loads((out / ".hookdump-partial" / "progress.json").read_text())
    assert all(s["stats"]["count"] > 0 for s in progress["streams"])  # the accumulators, kept per batch
    done = cli("capture", *SLOW_BY_3, photos, "-o", out, "--resume")
    assert done.exit_code == 0, done.stderr
    assert _stats_by_stem(out) == _stats_by_stem(whole)
    for name, stats in _stats_by_stem(out).items():
        _close(stats, _numpy_stats(np.load(out / f"{name}.npy")))


def test_merged_shards_have_the_stats_of_one_process(cli, photos: Path, tmp_path: Path) -> None:
    args = (*MODEL, *LAYERS, photos, "--batch-size", "1", "--format", "npy,safetensors")
    assert cli("capture", *args, "-o", tmp_path / "single").exit_code == 0
    shards = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(shards):
        assert cli("capture", *args, "-o", folder, "--shard", f"{i}/2").exit_code == 0
    merged = cli("merge", *shards, "-o", tmp_path / "merged")
    assert merged.exit_code == 0, merged.stderr
    single, joined = _stats_by_stem(tmp_path / "single"), _stats_by_stem(tmp_path / "merged")
    assert single.keys() == joined.keys()
    for name in single:
        assert joined[name] == single[name]  # rows summed exactly: bit for bit, whatever the batching
        _close(joined[name], _numpy_stats(np.load(tmp_path / "merged" / f"{name}.npy")))
