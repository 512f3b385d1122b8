"""Attention pictures through the real console script: each head's class-token map, the rollout, register
tokens without a class token, windowed attention refused; checked against attention computed by hand from
the seeded model's own q and k (softmax(q k^T / sqrt(d)))."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from helpers import hooked, levels
from PIL import Image
from read_back import tiles

VIT = "vit_tiny_patch16_224"


def by_hand(name: str, blocks: list[int], photo: Path) -> list[np.ndarray]:
    """Each block's attention (heads, L, L) for the photo, from its qkv output hooked by hand."""
    import timm

    heads = timm.create_model(name).blocks[0].attn.num_heads
    qkv = hooked(name, [f"blocks.{b}.attn.qkv" for b in blocks], photo)
    found = []
    for b in blocks:
        x = torch.from_numpy(qkv[f"blocks.{b}.attn.qkv"])[0]  # (L, 3 * C)
        tokens, width = x.shape
        q, k, _ = x.reshape(tokens, 3, heads, width // 3 // heads).permute(1, 2, 0, 3)
        weights = torch.softmax(q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5), dim=-1)
        found.append(weights.double().numpy())
    return found


def test_each_heads_picture_is_the_class_tokens_attention_to_the_patches(
    cli, chelsea: Path, tmp_path
) -> None:
    out = tmp_path / "out"
    result = cli(
        "capture", chelsea, "-m", VIT, "-l", "blocks.0.attn", "-l", "blocks.1.attn", "--attention", "-o", out
    )
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["num_prefix_tokens"] == 1 and manifest["model"]["class_token"] is True
    attention = by_hand(VIT, [0], chelsea)[0]
    drawn = tiles(cli, out, "blocks.0.attn.attn", "0:3", 14, 14)
    assert sorted(drawn) == [0, 1, 2]  # one tile per head, labelled with its number
    for head, tile in drawn.items():
        np.testing.assert_allclose(tile, levels(attention[head, 0, 1:].reshape(14, 14)), atol=1)
    over = cli("show", out, "--key", "blocks.0.attn.attn", "--overlay", chelsea, "--json")
    assert over.exit_code == 0, over.stderr
    meta = json.loads(over.stdout)
    assert meta["kind"] == "attention" and len(meta["tiles"]) == 3 and tuple(meta["tile"]) == (224, 224)
    assert "class token's attention to the 14x14 patches" in meta["layout"]


def test_rollout_through_the_blocks_equals_the_product_by_hand(cli, chelsea: Path, tmp_path) -> None:
    out = tmp_path / "out"
    assert (
        cli("capture", chelsea, "-m", VIT, "-l", "blocks.[0-2].attn", "--attention", "-o", out).exit_code == 0
    )
    result = cli("show", out, "--rollout", "--grey", "--json")
    assert result.exit_code == 0, result.stderr
    meta = json.loads(result.stdout)
    assert meta["kind"] == "rollout" and Path(meta["path"]) == out / "rollout.png"
    flow = np.eye(197)
    for attention in by_hand(VIT, [0, 1, 2], chelsea):  # Abnar & Zuidema: (mean over heads + I), rows to 1
        mixed = attention.mean(axis=0) + np.eye(197)
        flow = (mixed / mixed.sum(axis=1, keepdims=True)) @ flow
    with Image.open(meta["path"]) as png:
        image = np.asarray(png.convert("L")).astype(float)
    assert image.shape == (224, 224)
    np.testing.assert_allclose(image[::16, ::16], levels(flow[0, 1:].reshape(14, 14)), atol=1)
    over = cli("show", out, "--rollout", "--overlay", chelsea)
    assert over.exit_code == 0 and (out / "rollout.overlay.png").exists(), over.stderr
    nothing = cli("capture", chelsea, "-m", VIT, "-l", "blocks.0", "-o", tmp_path / "plain")
    assert nothing.exit_code == 0
    refused = cli("show", tmp_path / "plain", "--rollout")
    assert refused.exit_code == 2 and "--attention" in refused.stderr


def test_register_tokens_without_a_class_token(cli, chelsea: Path, tmp_path) -> None:
    """vit_little_patch16_reg4_gap_256: 4 register tokens, no class token; a head's map is the attention
    each patch receives from the patches."""
    name, out = "vit_little_patch16_reg4_gap_256", tmp_path / "out"
    result = cli("capture", chelsea, "-m", name, "-l", "blocks.0.attn", "--attention", "-o", out)
    assert result.exit_code == 0, result.stderr
    model = json.loads((out / "manifest.json").read_text())["model"]
    assert model["num_prefix_tokens"] == 4 and model["class_token"] is False
    attention = by_hand(name, [0], chelsea)[0]
    for head, tile in tiles(cli, out, "blocks.0.attn.attn", "0:2", 16, 16).items():
        np.testing.assert_allclose(tile, levels(attention[head, 4:, 4:].mean(axis=0).reshape(16, 16)), atol=1)
    refused = cli("capture", chelsea, "-m", name, "-l", "blocks.0", "--reduce", "cls", "-o", tmp_path / "cls")
    assert refused.exit_code == 2 and f"takes the class token, and {name} has none" in refused.stderr


def test_windowed_swin_attention_is_refused_with_the_reason(cli, chelsea: Path, tmp_path) -> None:
    out = tmp_path / "out"
    layer = "layers.0.blocks.0.attn"
    result = cli(
        "capture", chelsea, "-m", "swin_tiny_patch4_window7_224", "-l", layer, "--attention", "-o", out
    )
    assert result.exit_code == 0, result.stderr
    refused = cli("show", out, "--key", f"{layer}.attn")
    assert refused.exit_code == 4 and "windows, as in Swin" in refused.stderr
    assert not list(out.glob("*.png"))
