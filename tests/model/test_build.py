"""Model names, Twins aliases, plugins, checkpoints, pretrained weights and devices."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from common import PLUGINS
from safetensors.torch import save_file

from hookdump.model.sources.timm.names import ALIASES


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_twins_aliases_name_real_timm_models(alias: str) -> None:
    assert timm.is_model(ALIASES[alias])


def test_alias_is_announced_and_recorded(cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("capture", "-m", "pcpvt_small", "-l", "pos_block.0.proj.0", "--random-input", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "pcpvt_small is the Twins repository's name for timm's twins_pcpvt_small" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["timm_name"] == "twins_pcpvt_small"
    assert manifest["inputs"] == [{"random": True, "seed": 0, "shape": [1, 3, 224, 224]}]


def test_unknown_model_gets_close_matches(cli, tmp_path: Path) -> None:
    result = cli("capture", "-m", "resnet5O", "-l", "fc", "--random-input", "-o", tmp_path / "o")
    assert result.exit_code == 4
    assert "Unknown model `resnet5O`" in result.stderr
    assert "resnet50" in result.stderr
    assert not (tmp_path / "o").exists()


def test_seed_lenet_plugin_file(cli, plugins: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli(
        "capture", "--import", plugins / "lenet_plugin.py", "-m", "seed_lenet", "-l", "conv2",
        "--random-input", "--seed", "3", "--input-size", "3,32,32", "-o", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    conv2 = np.load(out / "conv2.npy")
    assert conv2.shape == (1, 16, 10, 10)


@pytest.mark.filterwarnings("ignore:Overwriting seed_lenet")
def test_plugin_as_module_name_on_sys_path(cli, plugins: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(plugins))
    result = cli("list-modules", "seed_lenet", "--import", "lenet_plugin", "--input-size", "3,32,32")
    assert result.exit_code == 0, result.stderr
    assert "conv2  Conv2d" in result.stdout and "(1, 16, 10, 10)" in result.stdout


def test_plugin_for_old_timm_is_an_input_error(cli, plugins: Path, tmp_path: Path) -> None:
    result = cli(
        "capture", "--import", plugins / "old_style_plugin.py", "-m", "old_style_net", "-l", "0",
        "--random-input", "-o", tmp_path / "o",
    )  # fmt: skip
    assert result.exit_code == 4
    assert "pretrained_cfg" in result.stderr and "**kwargs" in result.stderr


def test_plugin_that_fails_to_import(cli, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('registry is full')\n")
    result = cli("list-modules", "x", "--import", broken)
    assert result.exit_code == 4
    assert "Could not import plugin" in result.stderr and "registry is full" in result.stderr


@pytest.fixture(scope="module")
def lenet_weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    sys.path.insert(0, str(PLUGINS))
    try:
        from lenet_plugin import LeNet
    finally:
        sys.path.pop(0)
    torch.manual_seed(11)
    return {k: v.clone() for k, v in LeNet().state_dict().items()}


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_checkpoint_weights_are_used(cli, plugins, lenet_weights, tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"lenet{suffix}"
    if suffix == ".safetensors":
        save_file(lenet_weights, str(path))
    else:
        torch.save({"state_dict": lenet_weights, "epoch": 3}, path)
    out = tmp_path / "out"
    result = cli(
        "capture", "--import", plugins / "lenet_plugin.py", "-m", "seed_lenet", "--checkpoint", path,
        "-l", "conv1", "--random-input", "--input-size", "3,32,32", "-o", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    x = torch.randn((1, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    expected = torch.nn.functional.conv2d(x, lenet_weights["conv1.weight"], lenet_weights["conv1.bias"])
    np.testing.assert_allclose(np.load(out / "conv1.npy"), expected.numpy(), atol=1e-6, rtol=0)
    assert json.loads((out / "manifest.json").read_text())["model"]["checkpoint"] == str(path)


def test_checkpoint_mismatch_shows_a_key_diff(cli, plugins, lenet_weights, tmp_path: Path) -> None:
    weights = dict(lenet_weights)
    del weights["fc3.bias"]
    weights["fc4.weight"] = torch.zeros(3)
    weights["conv1.weight"] = torch.zeros(6, 3, 3, 3)
    path = tmp_path / "bad.pth"
    torch.save(weights, path)
    result = cli(
        "capture", "--import", plugins / "lenet_plugin.py", "-m", "seed_lenet", "--checkpoint", path,
        "-l", "conv1", "--random-input", "-o", tmp_path / "o",
    )  # fmt: skip
    assert result.exit_code == 4
    err = result.stderr
    assert "1 missing (in the model, not in the file): fc3.bias" in err
    assert "1 unexpected (in the file, not in the model): fc4.weight" in err
    assert "conv1.weight: file (6, 3, 3, 3) vs model (6, 3, 5, 5)" in err
    assert not (tmp_path / "o").exists()


def test_pickled_objects_are_refused_by_weights_only(cli, plugins, tmp_path: Path) -> None:
    path = tmp_path / "whole_model.pth"
    torch.save(torch.nn.Conv2d(3, 6, 5), path)  # a pickled module, not a state dict
    result = cli(
        "capture", "--import", plugins / "lenet_plugin.py", "-m", "seed_lenet", "--checkpoint", path,
        "-l", "conv1", "--random-input", "-o", tmp_path / "o",
    )  # fmt: skip
    assert result.exit_code == 4
    assert "weights_only=True" in result.stderr and "state_dict" in result.stderr


def test_missing_checkpoint(cli, tmp_path: Path) -> None:
    result = cli(
        "capture", "-m", "resnet18", "--checkpoint", tmp_path / "nope.pth", "-l", "fc", "--random-input"
    )
    assert result.exit_code == 4
    assert "does not exist" in result.stderr


def test_pretrained_offline_is_a_clear_error(tmp_path: Path) -> None:
    """Through the installed console script, with the hub told it is offline so it fails at once."""
    exe = shutil.which("hookdump", path=str(Path(sys.executable).parent))
    assert exe is not None
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = tmp_path / "o"
    proc = subprocess.run(
        [exe, "capture", "-m", "resnet18", "--pretrained", "-l", "fc", "--random-input", "-o", out],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "Could not get the pretrained weights of `resnet18`" in proc.stderr
    assert "--checkpoint" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_but_absent(cli, tmp_path: Path) -> None:
    result = cli(
        "capture", "-m", "resnet18", "-l", "fc", "--random-input", "--device", "cuda", "-o", tmp_path / "o"
    )
    assert result.exit_code == 2
    assert "CUDA is not available" in result.stderr and "--device cpu" in result.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_device_is_used(cli, tmp_path: Path) -> None:
    for device in ("cpu", "cuda"):
        result = cli(
            "capture", "-m", "test_resnet", "-l", "layer1", "--random-input", "--device", device,
            "-o", tmp_path / device,
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "cuda" / "manifest.json").read_text())["device"] == "cuda"
