"""The original report, end to end: alt_gvt_large, `pos_block` versus `pos_block.3.proj.0`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from common import inputs_of
from helpers import hand_hooks, photo_batch, seeded

from hookdump import api
from hookdump.errors import LayerError


def test_list_modules_marks_pos_block_as_a_container(cli) -> None:
    result = cli("list-modules", "alt_gvt_large")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    pos_block = next(line for line in lines if "pos_block  ModuleList" in line)
    assert "container" in pos_block and "never" in pos_block
    assert any("pos_block.3.proj.0  Conv2d" in line for line in lines)
    assert "twins_svt_large" in result.stderr  # the alias is announced


def test_capture_pos_block_fails_with_the_fix(cli, chelsea: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("capture", "--layer", "pos_block", chelsea, "-o", out)
    assert result.exit_code == 3
    message = result.stderr
    assert "`pos_block` is a ModuleList" in message
    assert "never fires" in message
    assert "pos_block.0, pos_block.1, pos_block.2, pos_block.3" in message
    assert "pos_block.3.proj.0" in message
    assert "Traceback" not in message
    assert not out.exists()


def test_typo_gets_the_closest_real_paths(cli, chelsea: Path, tmp_path: Path) -> None:
    result = cli("capture", "-l", "pos_blok.3.proj.0", chelsea, "-o", tmp_path / "out")
    assert result.exit_code == 3
    assert "Did you mean: pos_block.3.proj.0" in result.stderr


def test_state_dict_key_points_at_its_module(cli, chelsea: Path, tmp_path: Path) -> None:
    """The key `state_dict()` prints for the seed's conv hooks that conv, and says so."""
    result = cli("capture", "-l", "pos_block.3.proj.0.weight", chelsea, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    assert "hooking its module pos_block.3.proj.0" in result.stderr
    assert np.load(tmp_path / "out" / "pos_block.3.proj.0.npy").shape == (1, 1024, 7, 7)


def test_default_model_capture_writes_the_seed_layer(cli, chelsea: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("capture", "--layer", "pos_block[3].proj[0]", chelsea, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "default" in result.stderr and "alt_gvt_large" in result.stderr
    assert "random init" in result.stderr
    array = np.load(out / "pos_block.3.proj.0.npy")
    assert array.shape == (1, 1024, 7, 7) and array.dtype == np.float32
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == {
        "requested": "alt_gvt_large",
        "timm_name": "twins_svt_large",
        "imports": [],
        "checkpoint": None,
        "checkpoint_sha256": None,
        "pretrained": False,
        "seed": 0,
        "args": {},
        "num_prefix_tokens": None,  # Twins has no class or register tokens
        "class_token": False,
        "num_patch_tokens": None,  # no prefix tokens to leave out of a token map
        "source": "timm",  # the model's source: timm, torchvision (tv:NAME) or a module of the caller's
    }
    assert manifest["tensors"][0]["file"] == "pos_block.3.proj.0.npy"
    assert manifest["tensors"][0]["shape"] == [1, 1024, 7, 7]
    assert manifest["inputs"]["count"] == 1 and inputs_of(out)[0]["path"] == str(chelsea)


@pytest.fixture(scope="module")
def seeded_twins(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return seeded("twins_svt_small", tmp_path_factory.mktemp("ckpt"), seed=7)


def test_values_are_copies_taken_before_the_in_place_add(
    seeded_twins: tuple[torch.nn.Module, Path], chelsea: Path, tmp_path: Path
) -> None:
    """PosConv does `x += cnn_feat_token` right after proj.0: a kept reference would be wrong."""
    model, checkpoint = seeded_twins
    result = api.capture(
        [str(chelsea)],
        ["pos_block.1.proj.0", "blocks.0.0.attn"],
        model=api.ModelSpec("twins_svt_small", checkpoint=checkpoint),
        out=tmp_path / "out",
        formats="npy,pt",
    )
    saved = np.load(result.out / "pos_block.1.proj.0.npy")
    attn = torch.load(result.out / "blocks.0.0.attn.pt")

    copies, references = hand_hooks(
        model, ["pos_block.1.proj.0", "blocks.0.0.attn"], photo_batch(model, chelsea)
    )
    assert saved.shape == (1, 128, 28, 28)
    np.testing.assert_allclose(saved, copies["pos_block.1.proj.0"].numpy(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(attn.numpy(), copies["blocks.0.0.attn"].numpy(), atol=1e-6, rtol=0)
    # The trap is real: the reference kept by a naive hook was changed by the in-place add.
    assert not np.allclose(saved, references["pos_block.1.proj.0"].numpy(), atol=1e-3)


def test_api_raises_layer_error_before_writing(tmp_path: Path, chelsea: Path) -> None:
    with pytest.raises(LayerError, match="containers are never called"):
        api.capture([str(chelsea)], ["pos_block"], model="twins_svt_small", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
