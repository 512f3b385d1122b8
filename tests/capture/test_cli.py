"""capture through the CLI: inputs, batching, formats, output folders, errors, and the real console script."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from common import inputs_of
from safetensors.numpy import load_file

from hookdump.inputs.spec import sample_path

MODEL = ("-m", "test_resnet")


def test_folder_gives_batch_first_arrays_in_any_batch_size(cli, photos: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli("capture", *MODEL, "-l", "layer1", photos, "-o", one, "--seed", "0").exit_code == 0
    assert cli("capture", *MODEL, "-l", "layer1", photos, "-o", two, "--batch-size", "2").exit_code == 0
    # random init differs between runs, so compare each run's own images, not values across runs
    assert [Path(i["path"]).name for i in inputs_of(one)] == [
        "chelsea.png",
        "coffee.png",
        "astronaut.png",
    ]
    assert np.load(one / "layer1.npy").shape[0] == 3
    assert np.load(two / "layer1.npy").shape == np.load(one / "layer1.npy").shape


def test_batch_size_does_not_change_values(photos: Path, tmp_path: Path) -> None:
    from hookdump import api

    torch.manual_seed(0)
    import timm
    from safetensors.torch import save_file

    ckpt = tmp_path / "w.safetensors"
    save_file(timm.create_model("test_resnet").state_dict(), str(ckpt))
    spec = api.ModelSpec("test_resnet", checkpoint=ckpt)
    a = api.capture([str(photos)], ["layer2"], model=spec, out=tmp_path / "a", batch_size=3)
    b = api.capture([str(photos)], ["layer2"], model=spec, out=tmp_path / "b", batch_size=1)
    np.testing.assert_allclose(
        np.load(a.out / "layer2.npy"), np.load(b.out / "layer2.npy"), atol=1e-5, rtol=0
    )


def test_list_file_and_glob(cli, photos: Path, tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(f"# two photos\n{photos / 'coffee.png'}\n\nmore/astronaut.png\n")
    shutil.copytree(photos / "more", tmp_path / "more")
    out = tmp_path / "out"
    result = cli("capture", *MODEL, "-l", "conv1", f"@{listing}", str(photos / "c*.png"), "-o", out)
    assert result.exit_code == 0, result.stderr
    names = [Path(i["path"]).name for i in inputs_of(out)]
    assert names == ["coffee.png", "astronaut.png", "chelsea.png", "coffee.png"]
    assert np.load(out / "conv1.npy").shape[0] == 4


def test_bad_image_is_an_input_error_and_writes_nothing(cli, photos: Path, tmp_path: Path) -> None:
    (photos / "notes.png").write_text("not a picture")
    out = tmp_path / "out"
    result = cli("capture", *MODEL, "-l", "conv1", photos / "notes.png", photos / "coffee.png", "-o", out)
    assert result.exit_code == 4
    assert "notes.png` is not an image" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("-l", "conv1"), 2, "No input given"),
        (("-l", "conv1", "--sample", "--random-input"), 2, "not several"),
        (("-l", "conv1", "missing.jpg"), 4, "`missing.jpg` does not exist"),
        (("-l", "conv1", "--random-input", "--format", "npz"), 2, "Unknown --format `npz`"),
        (("-l", "conv1", "--random-input", "--what", "grads"), 2, "--what `grads`"),
        (("-l", "conv1", "--random-input", "--input-size", "224"), 2, "is not C,H,W"),
        (("--random-input",), 2, "No layer given"),
    ],
)
def test_usage_mistakes(cli, tmp_path: Path, args: tuple[str, ...], code: int, text: str) -> None:
    result = cli("capture", *MODEL, *args, "-o", tmp_path / "o")
    assert result.exit_code == code, result.stderr
    assert text in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("command", "size"), [("capture", "1,64,64"), ("list-modules", "3,64,64")])
def test_an_input_size_the_model_cannot_take(cli, tmp_path: Path, command: str, size: str) -> None:
    model = ("-m", "vit_tiny_patch16_224") if command == "list-modules" else MODEL
    extra = ("-l", "conv1", "--random-input", "-o", tmp_path / "o") if command == "capture" else ()
    result = cli(command, *model, "--input-size", size, *extra)
    assert result.exit_code == 2, result.stderr
    assert f"does not run on a {size.replace(',', 'x')} input" in result.stderr
    assert "Drop --input-size" in result.stderr and "unexpectedly" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_out_under_a_file_is_refused_before_any_work(cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", blocker / "sub")
    assert result.exit_code == 2 and "is not a writable folder" in result.stderr
    assert "note:" not in result.stderr  # refused before the model was even built


def test_existing_capture_needs_overwrite(cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("capture", *MODEL, "-l", "conv1", "-l", "layer1", "--random-input", "-o", out).exit_code == 0
    again = cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", out)
    assert again.exit_code == 2 and "--overwrite" in again.stderr
    replaced = cli("capture", *MODEL, "-l", "layer2", "--random-input", "-o", out, "--overwrite")
    assert replaced.exit_code == 0, replaced.stderr
    assert sorted(p.name for p in out.iterdir()) == ["layer2.npy", "manifest.json"]


def test_all_three_formats_hold_the_same_numbers(cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli(
        "capture",
        *MODEL,
        "-l",
        "layer1",
        "-l",
        "conv1",
        "--sample",
        "-o",
        out,
        "--format",
        "npy,pt,safetensors",
    )
    assert result.exit_code == 0, result.stderr
    npy = np.load(out / "layer1.npy")
    pt = torch.load(out / "layer1.pt")
    bundle = load_file(out / "tensors.safetensors")
    np.testing.assert_array_equal(npy, pt.numpy())
    np.testing.assert_array_equal(npy, bundle["layer1"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert {(t["file"], t["format"]) for t in manifest["tensors"]} == {
        ("layer1.npy", "npy"), ("layer1.pt", "pt"), ("tensors.safetensors", "safetensors"),
        ("conv1.npy", "npy"), ("conv1.pt", "pt"),
    }  # fmt: skip
    assert inputs_of(out)[0] == {
        "path": str(sample_path()),
        "sha256": hashlib.sha256(sample_path().read_bytes()).hexdigest(),
        "mode": "RGB",
        "size": [320, 213],
        "sample": True,
    }


def test_layer_that_does_not_fire_in_the_real_pass(cli, plugins: Path, tmp_path: Path) -> None:
    """The traced zero input takes `other`; a real photo takes `positive`."""
    args = (
        "capture",
        "--import",
        plugins / "branchy_plugin.py",
        "-m",
        "branchy_net",
        "--input-size",
        "3,16,16",
    )
    listed = cli(
        "list-modules", "branchy_net", "--import", plugins / "branchy_plugin.py", "--input-size", "3,16,16"
    )
    assert "traced with a real cpu pass" in listed.stderr
    refused = cli(*args, "-l", "positive", "--random-input", "-o", tmp_path / "a")
    assert refused.exit_code == 3 and "never called in the forward pass" in refused.stderr
    missed = cli(*args, "-l", "other", "--random-input", "-o", tmp_path / "b")
    assert missed.exit_code == 3
    assert "`other` did not fire during the forward pass of branchy_net" in missed.stderr
    assert not (tmp_path / "b").exists()


def test_json_output_is_the_manifest(cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("capture", *MODEL, "-l", "conv1.0", "--random-input", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == json.loads((out / "manifest.json").read_text())


def test_help_imports_no_torch() -> None:
    code = "import sys, hookdump.cli.app; assert 'torch' not in sys.modules and 'timm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hookdump", "capture", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "--layer" in proc.stdout
    assert "| torch\n" not in proc.stderr and " torch\n" not in proc.stderr


def test_installed_console_script_does_the_seed_job(tmp_path: Path) -> None:
    exe = shutil.which("hookdump", path=str(Path(sys.executable).parent))
    assert exe is not None
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("hookdump ")
    out = tmp_path / "out"
    proc = subprocess.run(
        [exe, "capture", "-m", "twins_svt_small", "-l", "pos_block.1.proj.0", "--sample", "-o", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "pos_block.1.proj.0.npy  output  (1, 128, 28, 28)  float32" in proc.stdout
    assert np.load(out / "pos_block.1.proj.0.npy").shape == (1, 128, 28, 28)


def test_debug_env_shows_the_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "HOOKDUMP_DEBUG": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "hookdump", "capture", *MODEL, "-l", "nope", "--random-input", "-o", tmp_path],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "LayerError" in proc.stderr


def test_early_stop_flag(cli, tmp_path: Path) -> None:
    for flag, stopped in (("--early-stop", True), ("--no-early-stop", False)):
        out = tmp_path / flag
        assert cli("capture", *MODEL, "-l", "layer1", "--random-input", flag, "-o", out).exit_code == 0
        assert json.loads((out / "manifest.json").read_text())["stopped_early"] is stopped


def test_a_failure_inside_the_model_is_exit_1_with_how_to_see_more(
    cli, plugins: Path, tmp_path: Path
) -> None:
    out = tmp_path / "o"
    args = ("--import", plugins / "odd_plugin.py", "-m", "fragile_net", "-l", "conv", "--random-input")
    result = cli("capture", *args, "--input-size", "3,8,8", "-o", out, "--no-early-stop")
    assert result.exit_code == 1
    assert "failed unexpectedly: RuntimeError: this model is broken" in result.stderr
    assert "HOOKDUMP_DEBUG=1" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()
