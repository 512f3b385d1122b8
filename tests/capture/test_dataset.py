"""Capture at dataset scale: resume after kill -9, sizes known before the work, --reduce, --save-dtype,
safetensors shards, --skip-bad, decoding workers, progress."""

from __future__ import annotations

import io
import json
import shutil
import signal
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np
import pytest
import torch
from common import SKIMAGE_DATA, inputs_of
from safetensors.numpy import load_file
from slow_runs import SLOW_BY_3, kill_when, mixed_photos, start_run

from hookdump.cli.progress import Progress

MODEL = ("-m", "test_resnet")


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_resume_after_kill_9_at_several_points_gives_the_same_bytes(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKDUMP_TEST_SLEEP", "0")  # in this process nothing is stopped; start_run's sleep
    photos = mixed_photos(tmp_path / "photos", 24)
    whole = tmp_path / "whole"
    args = (*SLOW_BY_3, photos, "--format", "npy,pt,safetensors")
    assert cli("capture", *args, "-o", whole).exit_code == 0
    out = tmp_path / "out"
    for images in (3, 12):  # killed after the first batch, then again half-way through
        run = start_run(["capture", *map(str, args), "-o", str(out), *(["--resume"] if images > 3 else [])])
        kill_when(run, out, images)
        assert run.returncode == -signal.SIGKILL
        assert not (out / "manifest.json").exists()  # nothing presents itself as complete
        refused = cli("capture", *args, "-o", out)
        assert refused.exit_code == 2 and "holds an interrupted capture" in refused.stderr
    done = cli("capture", *args, "-o", out, "--resume")
    assert done.exit_code == 0, done.stderr
    assert "resumed after" in done.stderr
    names = sorted(p.name for p in whole.iterdir() if p.name != "manifest.json")
    assert names == sorted(p.name for p in out.iterdir() if p.name != "manifest.json")
    for name in names:
        assert (whole / name).read_bytes() == (out / name).read_bytes(), name
    assert inputs_of(out) == inputs_of(whole)


def test_sigterm_leaves_a_folder_that_says_how_far_it_got(cli, tmp_path: Path) -> None:
    photos, out = mixed_photos(tmp_path / "photos", 24), tmp_path / "out"
    run = start_run(["capture", *SLOW_BY_3, str(photos), "-o", str(out)])
    kill_when(run, out, 6, signal.SIGTERM)
    assert run.returncode == 143
    manifest = _manifest(out)
    assert manifest["complete"] is False and manifest["progress"]["images_total"] == 24
    assert 6 <= manifest["progress"]["images_done"] < 24
    import hookdump
    from hookdump.errors import InputError

    with pytest.raises(InputError, match="incomplete capture") as refused:
        hookdump.open(out)
    assert "--resume" in (refused.value.hint or "")


def test_sigterm_stops_the_decoding_workers_before_exit_leaving_no_temp_folder(
    cli, tmp_path: Path, short_tmp: Path
) -> None:
    """A worker that multiprocessing kills at exit skips its own clean-up and leaves /tmp/pymp-* behind."""
    photos, out, tmp = mixed_photos(tmp_path / "photos", 24), tmp_path / "out", short_tmp
    run = start_run(["capture", *SLOW_BY_3, str(photos), "-o", str(out), "--workers", "1"], TMPDIR=str(tmp))
    kill_when(run, out, 6, signal.SIGTERM)
    assert run.returncode == 143
    assert sorted(p.name for p in tmp.iterdir()) == []


def test_a_resume_with_other_options_or_inputs_is_refused_naming_the_difference(cli, tmp_path: Path) -> None:
    photos, out = mixed_photos(tmp_path / "photos", 24), tmp_path / "out"
    run = start_run(["capture", *SLOW_BY_3, str(photos), "-o", str(out)])
    kill_when(run, out, 3)
    other = cli("capture", *SLOW_BY_3, photos, "-o", out, "--resume", "--batch-size", "2")
    assert other.exit_code == 2 and "batch_size: 3 then, 2 now" in other.stderr
    shutil.copy(SKIMAGE_DATA / "coffee.png", photos / "p00a.png")
    more = cli("capture", *SLOW_BY_3, photos, "-o", out, "--resume")
    assert more.exit_code == 2 and "capture of other inputs (row 1:" in more.stderr
    nothing = cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", tmp_path / "new", "--resume")
    assert nothing.exit_code == 2 and "Nothing to resume" in nothing.stderr


def test_sizes_are_known_before_the_work_and_match_the_files(cli, tmp_path: Path, photos: Path) -> None:
    dry = cli(
        "capture",
        *MODEL,
        "-l",
        "layer1",
        "-l",
        "conv1.0",
        photos,
        "--dry-run",
        "--json",
        "-o",
        tmp_path / "o",
    )
    assert dry.exit_code == 0, dry.stderr
    predicted = {m["name"]: m["bytes"] for m in json.loads(dry.stdout)}
    text = cli("capture", *MODEL, "-l", "layer1", "-l", "conv1.0", photos, "--dry-run", "-o", tmp_path / "o")
    assert "would write about" in text.stdout and "for 3 input(s)" in text.stdout
    assert (
        cli("capture", *MODEL, "-l", "layer1", "-l", "conv1.0", photos, "-o", tmp_path / "o").exit_code == 0
    )
    for name, size in predicted.items():
        array = np.load(tmp_path / "o" / f"{name}.npy")
        assert size == array.nbytes  # the estimate is the data that was written


def test_a_capture_that_cannot_fit_on_the_disk_stops_at_once(cli, tmp_path: Path) -> None:
    from PIL import Image

    photo = tmp_path / "coffee.png"  # the photo made small: --dry-run decodes each of the 2000 lines
    with Image.open(SKIMAGE_DATA / "coffee.png") as image:
        image.resize((60, 40)).save(photo)
    listing = tmp_path / "many.txt"
    listing.write_text(f"{photo}\n" * 2000)
    args = (
        "capture",
        *MODEL,
        "-l",
        "layer1",
        f"@{listing}",
        "--input-size",
        "3,4096,4096",
        "-o",
        tmp_path / "o",
    )
    for extra in (("--dry-run",), ()):
        result = cli(*args, *extra)
        assert result.exit_code == 4, result.stderr
        assert "This capture needs about" in result.stderr and "free" in result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("how", ["mean", "max"])
def test_reduce_pools_each_map_as_numpy_does(cli, tmp_path: Path, photos: Path, how: str) -> None:
    full, pooled = tmp_path / "full", tmp_path / "pooled"
    assert cli("capture", *MODEL, "-l", "layer1", "-l", "layer4", photos, "-o", full).exit_code == 0
    result = cli("capture", *MODEL, "-l", "layer1", "-l", "layer4", photos, "-o", pooled, "--reduce", how)
    assert result.exit_code == 0, result.stderr
    for name in ("layer1", "layer4"):
        maps = np.load(full / f"{name}.npy")
        expected = maps.mean(axis=(2, 3)) if how == "mean" else maps.max(axis=(2, 3))
        np.testing.assert_allclose(np.load(pooled / f"{name}.npy"), expected, rtol=1e-5, atol=1e-6)
    assert _manifest(pooled)["reduce"] == how and _manifest(pooled)["options"]["reduce"] == how


def test_reduce_cls_keeps_the_class_token(cli, tmp_path: Path) -> None:
    vit = ("-m", "test_vit", "-l", "blocks.0", "-l", "norm", "--sample")
    assert cli("capture", *vit, "-o", tmp_path / "full").exit_code == 0
    assert cli("capture", *vit, "-o", tmp_path / "cls", "--reduce", "cls").exit_code == 0
    for name in ("blocks.0", "norm"):
        np.testing.assert_array_equal(
            np.load(tmp_path / "cls" / f"{name}.npy"), np.load(tmp_path / "full" / f"{name}.npy")[:, 0]
        )
    refused = cli("capture", *MODEL, "-l", "layer1", "--sample", "--reduce", "cls", "-o", tmp_path / "r")
    assert refused.exit_code == 2 and "none of layer1 is one" in refused.stderr


def test_save_dtype_halves_the_files(cli, tmp_path: Path, photos: Path) -> None:
    full, half = tmp_path / "full", tmp_path / "half"
    assert cli("capture", *MODEL, "-l", "layer2", photos, "-o", full).exit_code == 0
    assert (
        cli("capture", *MODEL, "-l", "layer2", photos, "-o", half, "--save-dtype", "float16").exit_code == 0
    )
    a16 = np.load(half / "layer2.npy")
    assert a16.dtype == np.float16
    np.testing.assert_array_equal(a16, np.load(full / "layer2.npy").astype(np.float16))
    bf = cli("capture", *MODEL, "-l", "layer2", photos, "-o", tmp_path / "bf", "--save-dtype", "bfloat16")
    assert bf.exit_code == 2 and "numpy has no bfloat16" in bf.stderr
    args = ("-o", tmp_path / "bfs", "--save-dtype", "bfloat16", "--format", "safetensors")
    assert cli("capture", *MODEL, "-l", "layer2", photos, *args).exit_code == 0
    from safetensors.torch import load_file as load_torch

    kept = load_torch(tmp_path / "bfs" / "tensors.safetensors")["layer2"]
    assert kept.dtype == torch.bfloat16
    assert torch.equal(kept, torch.from_numpy(np.load(full / "layer2.npy")).bfloat16())


def test_safetensors_shards_in_hugging_faces_layout(cli, tmp_path: Path, photos: Path) -> None:
    out = tmp_path / "o"
    args = ("-l", "conv1", "-l", "layer1", "-l", "layer2", "-l", "layer3", photos, "-o", out)
    assert (
        cli("capture", *MODEL, *args, "--format", "npy,safetensors", "--shard-size", "300KB").exit_code == 0
    )
    index = json.loads((out / "tensors.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3 and all(s.endswith(f"-of-{len(shards):05d}.safetensors") for s in shards)
    assert index["metadata"]["total_size"] == sum(
        np.load(out / f"{k}.npy").nbytes for k in index["weight_map"]
    )
    for key, shard in index["weight_map"].items():
        np.testing.assert_array_equal(load_file(out / shard)[key], np.load(out / f"{key}.npy"))
    again = cli("capture", *MODEL, "-l", "conv1", photos, "-o", out, "--overwrite")
    assert again.exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "conv1.npy",
        "inputs.parquet",
        "manifest.json",
    ]  # shards gone


def test_skip_bad_records_unreadable_images_and_goes_on(cli, tmp_path: Path, photos: Path) -> None:
    (photos / "notes.png").write_text("not a picture")
    truncated = (SKIMAGE_DATA / "rocket.jpg").read_bytes()
    (photos / "cut.jpg").write_bytes(truncated[: len(truncated) // 3])
    stopped = cli("capture", *MODEL, "-l", "conv1", photos, "-o", tmp_path / "a")
    assert stopped.exit_code == 4 and "notes.png` is not an image" in stopped.stderr
    assert not (tmp_path / "a").exists()
    going = cli(
        "capture", *MODEL, "-l", "conv1", photos, "-o", tmp_path / "b", "--skip-bad", "--batch-size", "2"
    )
    assert going.exit_code == 0, going.stderr
    manifest = _manifest(tmp_path / "b")
    assert sorted(Path(s["path"]).name for s in manifest["skipped"]) == ["cut.jpg", "notes.png"]
    assert all(s["reason"] for s in manifest["skipped"])
    assert [Path(i["path"]).name for i in inputs_of(tmp_path / "b")] == [
        "chelsea.png",
        "coffee.png",
        "astronaut.png",
    ]
    assert np.load(tmp_path / "b" / "conv1.npy").shape[0] == 3
    assert "--skip-bad left out 2 unreadable input(s)" in going.stderr


def test_decoding_workers_keep_the_input_order_and_the_bytes(cli, tmp_path: Path) -> None:
    photos = mixed_photos(tmp_path / "photos", 10)
    for workers in ("0", "2"):
        out = tmp_path / workers
        result = cli(
            "capture", *MODEL, "-l", "layer1", photos, "-o", out, "--workers", workers, "--batch-size", "3"
        )
        assert result.exit_code == 0, result.stderr
    assert (tmp_path / "0" / "layer1.npy").read_bytes() == (tmp_path / "2" / "layer1.npy").read_bytes()
    assert inputs_of(tmp_path / "0") == inputs_of(tmp_path / "2")


def test_progress_is_a_plain_line_off_a_terminal_and_nothing_when_quiet(
    cli, tmp_path: Path, photos: Path
) -> None:
    buffer = io.StringIO()
    with redirect_stderr(buffer), Progress(every=0) as progress:
        progress.update(4, 8, 3_000_000)
        progress.update(8, 8, 6_000_000)  # the last: the capture's summary follows
    assert buffer.getvalue().startswith("hookdump: 4/8 images, ") and "3.0 MB written" in buffer.getvalue()
    assert "8/8" not in buffer.getvalue()
    with redirect_stderr(buffer := io.StringIO()), Progress(enabled=False) as progress:
        progress.update(4, 8, 3_000_000)
    assert buffer.getvalue() == ""
    quiet = cli("capture", *MODEL, "-l", "conv1", photos, "-o", tmp_path / "q", "--quiet")
    assert quiet.exit_code == 0 and quiet.stdout == "" and quiet.stderr == ""


def test_a_resumed_gradient_capture_keeps_every_images_class(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKDUMP_TEST_SLEEP", "0")  # in this process nothing is stopped; start_run's sleep
    photos = mixed_photos(tmp_path / "photos", 12)
    args = (*SLOW_BY_3, photos, "--grad")
    assert cli("capture", *args, "-o", tmp_path / "whole").exit_code == 0
    out = tmp_path / "out"
    run = start_run(["capture", *map(str, args), "-o", str(out)])
    kill_when(run, out, 6)
    done = cli("capture", *args, "-o", out, "--resume")
    assert done.exit_code == 0, done.stderr
    whole = _manifest(tmp_path / "whole")
    assert (
        _manifest(out)["grad"]["classes"] == whole["grad"]["classes"] and len(whole["grad"]["classes"]) == 12
    )
    for name in ("conv.npy", "conv.grad.npy", "act.grad.npy"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_batches_are_written_behind_the_forward_in_order_and_errors_surface() -> None:
    from hookdump.capture.behind import Behind

    done: list[int] = []
    behind = Behind(done.append)
    for i in range(50):
        behind.put(i)
    behind.close()
    behind.close()  # idempotent
    assert done == list(range(50))

    def fail(item: int) -> None:
        if item == 3:
            raise OSError(28, "No space left on device")
        done.append(item)

    done.clear()
    failing = Behind(fail)
    with pytest.raises(OSError, match="No space left"):
        for i in range(50):  # the error surfaces at a later put, not never
            failing.put(i)
        failing.close()
    failing.close(errors=False)
    assert done == [0, 1, 2]
