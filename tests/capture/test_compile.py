"""``--compile``: captures of a torch.compile'd model checked against hand-written eager hooks on real
photos; the in-place trap, structured outputs and a reused module traced into the graph; one graph for
every batch of the compiled size, the others eager; what it cannot do refused. On a CPU, inductor builds
its kernels with a C++ compiler, which the tests need (a machine without one is told so: last test)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from common import PLUGINS, SKIMAGE_DATA, inputs_of
from helpers import hand_hooks, odd_model, photo_batch, seeded

from hookdump import api
from hookdump.inputs.spec import InputSpec

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None, reason="torch.compile on a CPU needs a C++ compiler"
)
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "rocket.jpg")
LAYERS = ["layer1", "layer3"]
EXE = shutil.which("hookdump", path=str(Path(sys.executable).parent)) or "hookdump"


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Equal to float rounding: within 1e-5 of the tensor's largest magnitude (measured: 1.2e-6 at most)."""
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_compiled_capture_equals_hand_written_eager_hooks(cli, tmp_path: Path) -> None:
    model, weights = seeded("test_resnet", tmp_path, seed=5)
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in PHOTOS:
        shutil.copy(SKIMAGE_DATA / name, folder / name)
    out = tmp_path / "out"
    args = [
        "-m",
        "test_resnet",
        "--checkpoint",
        weights,
        "-l",
        LAYERS[0],
        "-l",
        LAYERS[1],
        "--batch-size",
        "2",
    ]
    result = cli("capture", folder, *args, "--compile", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "--compile: torch.compile (inductor) took" in result.stderr
    assert "1 graph(s), 0 graph break(s)" in result.stderr  # batches 2, 2: one graph; the last, of 1, eager
    assert "1 batch(es) of another size (1 images) ran eagerly" in result.stderr
    assert "the first batch ran eagerly too" in result.stderr
    ours = ("note:", "hookdump: ")  # notes and the progress line: no warning of torch's on the way
    assert all(line.startswith(ours) for line in result.stderr.splitlines() if line), result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    made = manifest["compile"]
    assert (made["graphs"], made["graph_breaks"], made["batch_size"], made["eager_batches"]) == (1, 0, 2, 1)
    assert 0 <= made["first_batch_difference"] <= 1e-5 and made["first_batch_seconds"] > 0
    assert manifest["options"]["compile"] is True
    paths = [Path(record["path"]) for record in inputs_of(out)]
    assert sorted(p.name for p in paths) == sorted(PHOTOS)
    for row, path in enumerate(paths):
        copies, _ = hand_hooks(model, LAYERS, photo_batch(model, path))
        for layer in LAYERS:
            _close(np.load(out / f"{layer}.npy")[row : row + 1], copies[layer].numpy())
    eager = cli("capture", folder, *args, "-o", tmp_path / "eager")
    assert eager.exit_code == 0, eager.stderr
    assert json.loads((tmp_path / "eager" / "manifest.json").read_text())["compile"] is None
    assert "--compile" not in eager.stderr


def test_in_place_ops_structures_and_reused_modules_trace_into_the_graph(tmp_path: Path) -> None:
    model, weights = odd_model(tmp_path, seed=8)
    spec = api.ModelSpec("odd_net", imports=(str(PLUGINS / "odd_plugin.py"),), checkpoint=weights)
    source = InputSpec(random=True, seed=2, input_size=(3, 8, 8))
    result = api.capture(source, ["conv", "split", "act"], model=spec, out=tmp_path / "o", compile=True)
    x = torch.randn((1, 3, 8, 8), generator=torch.Generator().manual_seed(2))
    copies, references = hand_hooks(model, ["conv"], x)
    load = {p.stem: np.load(p) for p in result.out.glob("*.npy")}
    _close(load["conv"], copies["conv"].numpy())  # as it was at hook time, before the model's `+= 1`
    assert np.abs(load["conv"] - references["conv"].numpy()).min() > 0.99  # not what a reference kept
    with torch.no_grad():
        y = torch.relu(model.conv(x) + 1.0)
        y = torch.relu(model.conv2(y)) + torch.relu(-y)
    _close(load["split.outmean"], y.mean(dim=1).numpy())
    _close(load["split.outparts.1"], y.clamp(min=0).numpy())
    assert sorted(k for k in load if k.startswith("act")) == ["act@0", "act@1", "act@2"]
    manifest = json.loads((result.out / "manifest.json").read_text())
    flagged = {t["file"] for t in manifest["tensors"] if t["modified_in_place_after_hook"]}
    assert flagged == {"conv.npy"}  # the eager pass of the first batch tells, as without --compile
    assert {(v["layer"], v["index"]): v["value"] for v in manifest["values"]} == {("split", "channels"): "8"}
    assert manifest["compile"]["graph_breaks"] == 0


def test_what_compile_cannot_do_is_refused(cli, tmp_path: Path) -> None:
    grad = cli(
        "capture",
        "-m",
        "test_resnet",
        "--sample",
        "-l",
        "layer1",
        "--compile",
        "--grad",
        "-o",
        tmp_path / "g",
    )
    assert grad.exit_code == 2
    assert "--compile and --grad" in grad.stderr and "Traceback" not in grad.stderr
    assert not (tmp_path / "g").exists()


def test_a_machine_without_a_cpp_compiler_is_told_so(tmp_path: Path) -> None:
    """The console script in a fresh process (inductor reads CXX when it is imported), with an empty cache
    (a kernel compiled before would need no compiler)."""
    env = {**os.environ, "CXX": str(tmp_path / "no-such-g++"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")}
    out = tmp_path / "out"
    args = ["capture", "-m", "test_resnet", "--sample", "-l", "layer1", "--compile", "-o", str(out)]
    result = subprocess.run([EXE, *args], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "torch.compile could not compile test_resnet" in result.stderr
    assert "install one (g++" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()  # nothing half-written
