"""show --gradcam: Grad-CAM from the files capture --grad wrote, against Grad-CAM computed by hand with
autograd on the same real model (EfficientNet-Lite0 with real ImageNet weights) and the same real photo."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from common import CHECKOUT
from helpers import photo_batch
from PIL import Image
from safetensors.torch import load_file

from hookdump.pictures.gradcam import cam_of

SCRIPT = CHECKOUT / "scripts" / "lite0_checkpoint.py"
TABBY = 281
LAYERS = ["blocks.5", "conv_head"]


@pytest.fixture(scope="module")
def lite0(tmp_path_factory: pytest.TempPathFactory, chelsea: Path) -> tuple[Path, Path]:
    """The real Lite0 weights (the README's recipe) and a capture of two layers with --grad for the tabby."""
    from typer.testing import CliRunner

    from hookdump.cli.app import app

    folder = tmp_path_factory.mktemp("gradcam")
    checkpoint = folder / "lite0.safetensors"
    runpy.run_path(str(SCRIPT))["main"](str(checkpoint))
    args = ["capture", str(chelsea), "-m", "efficientnet_lite0", "--checkpoint", str(checkpoint), "--grad"]
    args += ["--target", str(TABBY), "-l", LAYERS[0], "-l", LAYERS[1], "-o", str(folder / "out"), "-q"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return checkpoint, folder / "out"


def by_hand(checkpoint: Path, photo: Path) -> dict[str, np.ndarray]:
    """Grad-CAM of each layer for the tabby class: hand-written hooks, torch.autograd, numpy."""
    model = timm.create_model("efficientnet_lite0")
    model.load_state_dict(load_file(str(checkpoint)))
    model.eval()
    outputs: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(module: torch.nn.Module, args: object, out: torch.Tensor) -> None:
            out.retain_grad()
            outputs[name] = out

        return hook

    handles = [model.get_submodule(n).register_forward_hook(keep(n)) for n in LAYERS]
    try:
        logits = model(photo_batch(model, photo))
    finally:
        for handle in handles:
            handle.remove()
    assert int(logits.argmax()) in range(281, 286)  # the real weights see a cat
    logits[0, TABBY].backward()
    cams = {}
    for name, out in outputs.items():
        a, g = out[0].detach().double().numpy(), out.grad[0].double().numpy()
        cam = np.maximum((g.mean(axis=(1, 2))[:, None, None] * a).sum(axis=0), 0)
        cams[name] = (cam - cam.min()) / (cam.max() - cam.min())
    return cams


def test_gradcam_matches_autograd_by_hand(cli, lite0: tuple[Path, Path], chelsea: Path, tmp_path) -> None:
    checkpoint, out = lite0
    hand = by_hand(checkpoint, chelsea)
    np.testing.assert_allclose(cam_of(out / "conv_head.npy").cam, hand["conv_head"], atol=1e-4)
    np.testing.assert_allclose(cam_of(out, key="blocks.5").cam, hand["blocks.5"], atol=1e-4)
    # the PNG: alpha 1 and grey levels show the cam itself, resized (bilinear) onto the model's 224x224 crop
    png = tmp_path / "cam.png"
    result = cli(
        "show", out / "conv_head.npy", "--gradcam", "--overlay", chelsea, "--grey", "--alpha", "1", "-o", png
    )
    assert result.exit_code == 0, result.stderr
    assert f"Grad-CAM (class {TABBY}) of 1280 channels" in result.stdout
    with Image.open(png) as image:
        drawn = np.asarray(image.convert("RGB")).astype(int)
    resized = Image.fromarray(hand["conv_head"].astype(np.float32)).resize(
        (224, 224), Image.Resampling.BILINEAR
    )
    want = np.round(np.asarray(resized) * 255)
    assert drawn.shape == (224, 224, 3) and np.abs(drawn[..., 0] - want).max() <= 1


def test_a_folder_gets_one_gradcam_per_layer(cli, lite0: tuple[Path, Path], chelsea: Path) -> None:
    _, out = lite0
    result = cli("show", out, "--gradcam", "--overlay", chelsea, "--json")
    assert result.exit_code == 0, result.stderr
    written = [Path(r["path"]).name for r in json.loads(result.stdout)]
    assert written == ["blocks.5.gradcam.png", "conv_head.gradcam.png"]  # gradients are inputs, not pictures


def test_channels_last_gradcam_by_hand(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    acts, grads = rng.standard_normal((2, 2, 5, 6, 4)).astype(np.float32)  # (N, H, W, C)
    entries = []
    for kind, name, values in (("output", "s.npy", acts), ("grad", "s.grad.npy", grads)):
        np.save(tmp_path / name, values)
        entries.append({"layer": "s", "kind": kind, "index": None, "call": 0, "file": name, "format": "npy",
                        "shape": list(values.shape), "dtype": "float32", "layout": "NHWC"})  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps({"tensors": entries}))
    cam = np.maximum((grads[1].mean(axis=(0, 1)) * acts[1]).sum(axis=2), 0)  # weights over H, W; sum over C
    np.testing.assert_allclose(
        cam_of(tmp_path / "s.npy", index=1).cam, (cam - cam.min()) / (cam.max() - cam.min()), atol=1e-6
    )


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("plain.npy", "has no gradient beside it"),
        ("plain.grad.npy", "is a gradient: --gradcam reads it beside"),
    ],
)
def test_gradcam_without_a_gradient_says_how_to_get_one(
    cli, chelsea: Path, tmp_path, file: str, text: str
) -> None:
    np.save(tmp_path / file, np.ones((1, 2, 3, 3), np.float32))
    result = cli("show", tmp_path / file, "--gradcam", "--overlay", chelsea)
    assert result.exit_code == 4 and text in result.stderr
    assert "Capture again with --grad" in result.stderr or "without .grad" in result.stderr
    assert not list(tmp_path.glob("*.png"))
