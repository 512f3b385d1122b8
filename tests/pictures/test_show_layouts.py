"""show lays maps out as the model sees them: timm Swin's channels-last stages and a ViT with register
tokens, captured through the CLI, checked against the same seeded model hooked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from helpers import hooked, levels
from read_back import tiles


def test_swin_channels_last_stages_are_drawn_as_the_model_sees_them(cli, chelsea: Path, tmp_path) -> None:
    name, layers = "swin_tiny_patch4_window7_224", ["layers.0", "layers.1"]
    out = tmp_path / "out"
    result = cli("capture", chelsea, "-m", name, "-l", layers[0], "-l", layers[1], "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    entries = json.loads((out / "manifest.json").read_text())["tensors"]
    assert [e["layout"] for e in entries] == [
        "NHWC",
        "NHWC",
    ]  # capture records it: Swin stages are (N, H, W, C)
    outputs = hooked(name, layers, chelsea)
    for layer, (h, c) in zip(layers, [(56, 96), (28, 192)], strict=True):
        nhwc = outputs[layer]
        assert nhwc.shape == (1, h, h, c)
        drawn = tiles(cli, out, layer, "0:5", h, h)
        assert sorted(drawn) == [0, 1, 2, 3, 4]
        for k, tile in drawn.items():  # channel k's tile is the map tensor[0, :, :, k], not tensor[0, k]
            np.testing.assert_allclose(tile, levels(nhwc[0, :, :, k]), atol=1)


def test_vit_with_register_tokens_drops_every_prefix_token(cli, chelsea: Path, tmp_path: Path) -> None:
    name = "vit_little_patch16_reg4_gap_256"  # no class token, 4 registers: 4 + 16*16 = 260 tokens
    out = tmp_path / "out"
    result = cli("capture", chelsea, "-m", name, "-l", "blocks.0", "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["num_prefix_tokens"] == 4
    tokens = hooked(name, ["blocks.0"], chelsea)["blocks.0"]
    assert tokens.shape[1] == 260 and math.isqrt(260 - 4) == 16
    summary = cli("show", out, "--key", "blocks.0", "--channels", "0:1")
    assert "260 tokens of 320 channels as a 16x16 grid (first 4 token(s) dropped" in summary.stdout
    for k, tile in tiles(cli, out, "blocks.0", "7:10", 16, 16).items():
        np.testing.assert_allclose(tile, levels(tokens[0, 4:, k].reshape(16, 16)), atol=1)
