"""Which axis holds the channels: recorded per tensor from the module that made it (Swin's channels-last
stages, ConvNeXt's channels-last MLPs, tokens, vectors), used by --reduce, and the model's prefix tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

from hookdump.model import layouts


def _entries(out: Path) -> dict[str, dict]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {e["file"].rsplit(".npy", 1)[0]: e for e in manifest["tensors"]}


def test_swin_stages_are_recorded_channels_last_and_reduce_pools_their_space(cli, tmp_path: Path) -> None:
    swin = ("-m", "swin_tiny_patch4_window7_224", "--sample", "-l", "layers.0", "-l", "patch_embed.proj")
    assert cli("capture", *swin, "-l", "layers.0.blocks.0.norm1", "-o", tmp_path / "full").exit_code == 0
    entries = _entries(tmp_path / "full")
    channels = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False).feature_info[0]["num_chs"]
    # timm's own feature_info says stage 0 has 96 channels: the last axis of the (1, 56, 56, 96) map.
    assert entries["layers.0"]["shape"][3] == channels and entries["layers.0"]["layout"] == "NHWC"
    assert entries["layers.0.blocks.0.norm1"]["layout"] == "NHWC"
    assert entries["patch_embed.proj"]["layout"] == "NCHW"  # the conv inside the patch embedding
    pooled = cli("capture", *swin, "-o", tmp_path / "mean", "--reduce", "mean")
    assert pooled.exit_code == 0, pooled.stderr
    maps = np.load(tmp_path / "full" / "layers.0.npy")
    got = np.load(tmp_path / "mean" / "layers.0.npy")
    assert got.shape == (1, channels)
    np.testing.assert_allclose(got, maps.mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        np.load(tmp_path / "mean" / "patch_embed.proj.npy"),
        np.load(tmp_path / "full" / "patch_embed.proj.npy").mean(axis=(2, 3)),
        rtol=1e-5,
        atol=1e-6,
    )
    assert _entries(tmp_path / "mean")["layers.0"]["layout"] == "NC"


@pytest.mark.parametrize("name", ["convnext_tiny", "convnext_atto"])
def test_convnext_blocks_are_channels_first_around_their_mlp(name: str) -> None:
    """Checked against the modules' own sizes: the MLP's hidden layer has 4x the block's channels, so
    the axis that holds them says which layout each output has. convnext_tiny runs its MLP channels-last
    (nn.LayerNorm, nn.Linear); convnext_atto channels-first (LayerNorm2d, 1x1 convs)."""
    model = timm.create_model(name, pretrained=False).eval()
    block = "stages.0.blocks.0"
    paths = [
        block,
        f"{block}.conv_dw",
        f"{block}.norm",
        f"{block}.mlp",
        f"{block}.mlp.fc1",
        f"{block}.mlp.act",
    ]
    shapes: dict[str, tuple[int, ...]] = {}
    modules = dict(model.named_modules())

    def keep(path: str):
        return lambda module, args, output: shapes.__setitem__(path, tuple(output.shape))

    handles = [modules[p].register_forward_hook(keep(p)) for p in paths]
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, 64, 64))
    finally:
        for handle in handles:
            handle.remove()
    last = layouts.channels_last_paths(model, paths)
    channels = modules[f"{block}.conv_dw"].out_channels
    for path in paths:
        assert shapes[path][3 if path in last else 1] in (channels, 4 * channels), (path, shapes[path], last)
        other = shapes[path][1 if path in last else 3]
        assert other not in (channels, 4 * channels), (path, shapes[path], last)
    mlp = {f"{block}.norm", f"{block}.mlp", f"{block}.mlp.fc1", f"{block}.mlp.act"}
    assert last == (mlp if name == "convnext_tiny" else set())


def test_tokens_vectors_attention_and_prefix_tokens_are_recorded(cli, tmp_path: Path) -> None:
    vit = (
        "-m",
        "deit_tiny_distilled_patch16_224",
        "--sample",
        "-l",
        "blocks.0",
        "-l",
        "head",
        "-l",
        "blocks.0.attn",
    )
    result = cli("capture", *vit, "--attention", "-o", tmp_path / "deit")
    assert result.exit_code == 0, result.stderr
    entries = _entries(tmp_path / "deit")
    assert entries["blocks.0"]["layout"] == "NLC" and entries["head"]["layout"] == "NC"
    assert entries["blocks.0.attn.attn"]["layout"] == "attn"
    manifest = json.loads((tmp_path / "deit" / "manifest.json").read_text())
    model = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False)
    assert manifest["model"]["num_prefix_tokens"] == model.num_prefix_tokens == 2  # class + distillation
    resnet = cli(
        "capture",
        "-m",
        "resnet18",
        "--sample",
        "-l",
        "layer1",
        "--input-size",
        "3,64,64",
        "-o",
        tmp_path / "r",
    )
    assert resnet.exit_code == 0 and _entries(tmp_path / "r")["layer1"]["layout"] == "NCHW"
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["model"]["num_prefix_tokens"] is None


def test_reduce_cls_is_refused_on_tokens_without_a_class_token(cli, tmp_path: Path) -> None:
    twins = ("-m", "twins_svt_small", "--sample", "-l", "blocks.0.0", "--reduce", "cls", "-o", tmp_path / "t")
    refused = cli("capture", *twins, "--dry-run")
    assert refused.exit_code == 2 and "has none" in refused.stderr and "--reduce mean" in refused.stderr
