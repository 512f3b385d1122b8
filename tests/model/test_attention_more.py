"""--attention found by what a module computes (DaViT's WindowAttention: an nn.Softmax child, no attn_drop),
and CaiT's talking-heads weights said to be what they are (mixed across heads, rows not summing to 1), each
checked against the attention computed by hand from the captured qkv and the seeded model's weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from helpers import q_k, seeded, softmax


def test_davit_window_attention_is_captured_from_its_softmax(cli, tmp_path: Path, chelsea: Path) -> None:
    model, checkpoint = seeded("davit_tiny", tmp_path, 8)
    attn = model.stages[0].blocks[0][0].attn
    assert not hasattr(attn, "attn_drop")  # the case: no attn_drop child to hook
    out = tmp_path / "o"
    layer = "stages.0.blocks.0.0.attn"
    args = ("-l", layer, "-l", f"{layer}.qkv", "--checkpoint", checkpoint)
    result = cli("capture", "-m", "davit_tiny", *args, chelsea, "-o", out, "--attention")
    assert result.exit_code == 0, result.stderr
    weights = np.load(out / f"{layer}.attn.npy")
    assert weights.shape == (64, attn.num_heads, 49, 49)  # (N * windows, heads, w*w, w*w)
    q, k = q_k(np.load(out / f"{layer}.qkv.npy"), attn.num_heads)
    by_hand = softmax(q * attn.scale @ k.transpose(0, 1, 3, 2))
    np.testing.assert_allclose(weights, by_hand, atol=1e-6)
    listed = cli("list-modules", "davit_tiny", "--filter", f"{layer}.softmax")
    assert "fused attention: never called" in listed.stdout  # without --attention it never runs, said so


def test_cait_talking_heads_weights_are_the_mixed_ones_and_said_so(
    cli, tmp_path: Path, chelsea: Path
) -> None:
    model, checkpoint = seeded("cait_xxs24_224", tmp_path, 9)
    attn = model.blocks[0].attn
    out = tmp_path / "o"
    args = ("-l", "blocks.0.attn", "-l", "blocks.0.attn.qkv", "--checkpoint", checkpoint)
    result = cli("capture", "-m", "cait_xxs24_224", *args, chelsea, "-o", out, "--attention")
    assert result.exit_code == 0, result.stderr
    weights = np.load(out / "blocks.0.attn.attn.npy")
    q, k = q_k(np.load(out / "blocks.0.attn.qkv.npy"), attn.num_heads)

    def mix(x: np.ndarray, linear) -> np.ndarray:  # a Linear over the heads axis
        w, b = (p.detach().double().numpy() for p in (linear.weight, linear.bias))
        return (x.transpose(0, 2, 3, 1) @ w.T + b).transpose(0, 3, 1, 2)

    by_hand = mix(softmax(mix(q * attn.scale @ k.transpose(0, 1, 3, 2), attn.proj_l)), attn.proj_w)
    np.testing.assert_allclose(weights, by_hand, atol=1e-6)
    assert np.abs(weights.sum(-1) - 1).max() > 0.1  # really not a softmax's rows
    said = "blocks.0.attn.attn (TalkingHeadAttn) holds talking-heads weights"
    assert said in result.stderr
    notes = json.loads((out / "manifest.json").read_text())["notes"]
    assert any(said in note and "rows do not sum to 1" in note for note in notes)
