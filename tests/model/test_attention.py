"""--attention: the softmax weights of timm's attention modules, checked against softmax(q k^T / sqrt(d))
computed by hand from the captured q and k, for a ViT and a Swin window; the model's outputs unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import timm
import torch
from helpers import q_k, seeded, softmax

VIT = "vit_tiny_patch16_224"
SWIN = "swin_tiny_patch4_window7_224"


def test_vit_attention_is_softmax_of_q_k(cli, tmp_path: Path, chelsea: Path) -> None:
    out = tmp_path / "o"
    result = cli(
        "capture",
        "-m",
        VIT,
        "-l",
        "blocks.3.attn",
        "-l",
        "blocks.3.attn.qkv",
        chelsea,
        "-o",
        out,
        "--attention",
    )
    assert result.exit_code == 0, result.stderr
    assert "blocks.3.attn.attn.npy" in result.stdout
    heads = timm.create_model(VIT).blocks[3].attn.num_heads
    weights = np.load(out / "blocks.3.attn.attn.npy")
    assert weights.shape == (1, heads, 197, 197)
    q, k = q_k(np.load(out / "blocks.3.attn.qkv.npy"), heads)
    by_hand = softmax(q @ k.transpose(0, 1, 3, 2) * q.shape[-1] ** -0.5)
    np.testing.assert_allclose(weights, by_hand, atol=2e-6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    entry = next(t for t in json.loads((out / "manifest.json").read_text())["tensors"] if t["kind"] == "attn")
    assert (entry["layer"], entry["file"]) == ("blocks.3.attn", "blocks.3.attn.attn.npy")


def test_swin_window_attention_is_softmax_of_q_k_plus_bias(cli, tmp_path: Path, chelsea: Path) -> None:
    model, checkpoint = seeded(SWIN, tmp_path, 3)
    attn = model.layers[0].blocks[0].attn
    out = tmp_path / "o"
    args = ("-l", "layers.0.blocks.0.attn", "-l", "layers.0.blocks.0.attn.qkv", "--checkpoint", checkpoint)
    result = cli("capture", "-m", SWIN, *args, chelsea, "-o", out, "--attention")
    assert result.exit_code == 0, result.stderr
    windows = (224 // 4 // 7) ** 2
    weights = np.load(out / "layers.0.blocks.0.attn.attn.npy")
    assert weights.shape == (windows, attn.num_heads, 49, 49)  # (N * windows, heads, w*w, w*w)
    q, k = q_k(np.load(out / "layers.0.blocks.0.attn.qkv.npy"), attn.num_heads)
    with torch.no_grad():
        bias = attn._get_rel_pos_bias().double().numpy()  # the seeded model's own, built apart
    by_hand = softmax(q * attn.scale @ k.transpose(0, 1, 3, 2) + bias)
    np.testing.assert_allclose(weights, by_hand, atol=2e-6)


def test_outputs_with_and_without_attention_agree(cli, tmp_path: Path, chelsea: Path) -> None:
    layers = ("-l", "blocks.11.attn", "-l", "head")
    assert cli("capture", "-m", VIT, *layers, chelsea, "-o", tmp_path / "fused").exit_code == 0
    assert (
        cli("capture", "-m", VIT, *layers, chelsea, "-o", tmp_path / "unfused", "--attention").exit_code == 0
    )
    for name in ("blocks.11.attn", "head"):
        fused, unfused = (np.load(tmp_path / d / f"{name}.npy") for d in ("fused", "unfused"))
        scale = np.abs(fused).max()
        assert np.abs(fused - unfused).max() <= 1e-5 * max(scale, 1.0), name  # README: measured tolerance


def test_fused_attention_is_explained_and_refused_with_the_fix(cli, tmp_path: Path) -> None:
    listed = cli("list-modules", VIT, "--filter", "blocks.0.attn.attn_drop")
    assert "fused attention: never called" in listed.stdout and "--attention makes it run" in listed.stdout
    drop = cli("capture", "-m", VIT, "-l", "blocks.0.attn.attn_drop", "--sample", "-o", tmp_path / "a")
    assert drop.exit_code == 3
    assert (
        "`blocks.0.attn` uses fused attention" in drop.stderr
        and "Pass --attention with -l blocks.0.attn" in drop.stderr
    )
    none = cli("capture", "-m", VIT, "-l", "blocks.0.mlp", "--sample", "-o", tmp_path / "b", "--attention")
    assert none.exit_code == 3 and "none of the layers asked for is an attention module" in none.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
