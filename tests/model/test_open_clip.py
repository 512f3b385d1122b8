"""open_clip:ARCH, the image tower of an OpenCLIP model: a ViT-S-32 CLIP model made by open_clip itself
(seeded random weights, saved as a state dict) captured once through the console script, checked against
open_clip (``encode_image`` through its own preprocess on real photos) and hand-written hooks on the same
model."""

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
from common import SKIMAGE_DATA, resumed_and_sharded
from PIL import Image

open_clip = pytest.importorskip("open_clip")
pytestmark = pytest.mark.model_source

from hookdump import api  # noqa: E402
from hookdump.errors import LayerError, UsageError  # noqa: E402
from hookdump.model.spec import ModelSpec  # noqa: E402

ARCH = "ViT-S-32"
MODEL = f"open_clip:{ARCH}"
PHOTOS = ("chelsea.png", "coffee.png", "astronaut.png")
BLOCK = "visual.transformer.resblocks.3"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, object, Path]:
    """open_clip's own CLIP model (seeded random weights), its eval preprocess, and its state dict on disk."""
    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms(ARCH, pretrained=None)
    path = tmp_path_factory.mktemp("clip") / "clip.pth"
    torch.save(model.state_dict(), path)
    return model.eval(), preprocess, path


@pytest.fixture(scope="module")
def captured(clip: tuple[torch.nn.Module, object, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One capture through the installed console script: the tower's output, a block, its gradient."""
    out = tmp_path_factory.mktemp("oc-out") / "out"
    exe = shutil.which("hookdump", path=str(Path(sys.executable).parent))
    assert exe is not None
    photos = [str(SKIMAGE_DATA / p) for p in PHOTOS]
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [exe, "capture", "-m", MODEL, "--checkpoint", str(clip[2]), *photos, "-l", "visual", "-l", BLOCK,
         "--grad", "-o", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "text tower and the rest of the CLIP model were left out" in proc.stderr
    return out


def pixels(preprocess: object) -> torch.Tensor:
    """The photos through open_clip's own eval preprocess (not hookdump's)."""
    return torch.stack([preprocess(Image.open(SKIMAGE_DATA / p).convert("RGB")) for p in PHOTOS])  # type: ignore[operator]


def test_visual_is_encode_image(clip: tuple[torch.nn.Module, object, Path], captured: Path) -> None:
    model, preprocess, _ = clip
    with torch.no_grad():
        expected = model.encode_image(pixels(preprocess)).numpy()  # type: ignore[operator]
    got = np.load(captured / "visual.npy")
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_a_block_is_a_hand_written_hook_and_its_grad_is_autograd(
    clip: tuple[torch.nn.Module, object, Path], captured: Path
) -> None:
    model, preprocess, _ = clip
    kept: list[torch.Tensor] = []

    def keep(module: torch.nn.Module, args: object, out: torch.Tensor) -> None:
        out.retain_grad()
        kept.append(out)

    handle = model.visual.transformer.resblocks[3].register_forward_hook(keep)  # type: ignore[union-attr,index]
    try:
        embedding = model.visual(pixels(preprocess))  # type: ignore[operator]
        embedding.gather(1, embedding.argmax(1, keepdim=True)).sum().backward()
    finally:
        handle.remove()
    assert kept[0].grad is not None
    np.testing.assert_allclose(
        np.load(captured / f"{BLOCK}.npy"), kept[0].detach().numpy(), rtol=0, atol=1e-5
    )
    np.testing.assert_allclose(
        np.load(captured / f"{BLOCK}.grad.npy"), kept[0].grad.numpy(), rtol=0, atol=1e-6
    )


def test_manifest_says_what_was_loaded_and_the_transform(captured: Path) -> None:
    manifest = json.loads((captured / "manifest.json").read_text())
    model = manifest["model"]
    assert model["source"] == "open_clip" and model["open_clip"] == ARCH and model["tag"] is None
    assert model["num_prefix_tokens"] == 1 and model["class_token"] is True
    text = json.dumps(manifest)
    assert "0.48145466" in text and "bicubic" in text  # open_clip's OpenAI mean, its interpolation


def test_reduce_cls_and_a_tower_only_checkpoint(
    clip: tuple[torch.nn.Module, object, Path], captured: Path, tmp_path: Path
) -> None:
    tower = tmp_path / "tower.pth"
    torch.save(clip[0].visual.state_dict(), tower)  # type: ignore[union-attr]
    photos = [str(SKIMAGE_DATA / p) for p in PHOTOS]
    api.capture(photos, [BLOCK], model=ModelSpec(MODEL, checkpoint=tower), out=tmp_path / "out", reduce="cls")
    first = np.load(captured / f"{BLOCK}.npy")[:, 0]
    np.testing.assert_allclose(np.load(tmp_path / "out" / f"{BLOCK}.npy"), first, rtol=0, atol=1e-5)


def test_show_and_report_read_the_capture(cli, captured: Path, tmp_path: Path) -> None:
    shown = cli("show", captured, "--key", BLOCK, "-o", tmp_path / "block.png")
    assert shown.exit_code == 0, shown.stderr
    assert list(tmp_path.glob("block*.png"))
    assert cli("report", captured).exit_code == 0
    assert BLOCK in (captured / "index.html").read_text()


def test_list_modules_globs_feat_and_containers(cli, chelsea: Path) -> None:
    listed = cli("list-modules", "-m", MODEL, "--model-arg", "layers=2")
    assert listed.exit_code == 0, listed.stderr
    for line in (
        "visual.transformer.resblocks.1.mlp.c_fc  Linear",
        "visual.transformer.resblocks  ModuleList  [container",
        "feat:1",
    ):
        assert line in listed.stdout
    two = ModelSpec(MODEL, model_args={"layers": 2})
    found = api.plan(["visual.transformer.resblocks.*.mlp", "feat:0"], model=two, images=[str(chelsea)])
    blocks = "visual.transformer.resblocks"
    assert sorted(t.path for t in found.targets) == [f"{blocks}.0", f"{blocks}.0.mlp", f"{blocks}.1.mlp"]
    with pytest.raises(LayerError, match=r"`transformer\.resblocks\.0` is not a module"):
        api.plan(["transformer.resblocks.0"], model=two, images=[str(chelsea)])
    refused = cli(
        "capture", "-m", MODEL, "--model-arg", "layers=2", chelsea, "-l", "visual.transformer.resblocks"
    )
    assert refused.exit_code == 3
    assert "visual.transformer.resblocks.0, visual.transformer.resblocks.1" in refused.stderr


def test_a_modified_resnet_tower(chelsea: Path, tmp_path: Path) -> None:
    """RN50's tower (open_clip's ModifiedResNet): stages as feature levels, no tokens to take the first of."""
    small = ModelSpec("open_clip:RN50", model_args={"image_size": 64})  # the attention pool's size too
    found = api.plan(["feat:3"], model=small, images=[str(chelsea)])
    assert [t.path for t in found.targets] == ["visual.layer4"]
    api.capture([str(chelsea)], ["feat:3"], model=small, out=tmp_path / "out")
    assert np.load(tmp_path / "out" / "visual.layer4.npy").shape == (1, 2048, 2, 2)
    with pytest.raises(UsageError, match="--reduce cls takes the first token"):
        api.capture([str(chelsea)], ["visual.layer4"], model=small, out=tmp_path / "cls", reduce="cls")


def test_errors_are_one_paragraph(
    cli, chelsea: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = cli("list-modules", "-m", "open_clip:ViT-B-33")
    assert unknown.exit_code == 4 and "open_clip:ViT-B-32" in unknown.stderr  # did you mean
    untagged = cli(
        "capture", "-m", "open_clip:ViT-B-32", "--pretrained", chelsea, "-l", "visual", "-o", tmp_path / "u"
    )
    assert untagged.exit_code == 2 and "open_clip:ViT-B-32:openai" in untagged.stderr
    no_tag = cli("list-modules", "-m", "open_clip:ViT-B-32:nosuch")
    assert no_tag.exit_code == 4 and "laion2b_s34b_b79k" in no_tag.stderr
    arg = cli("list-modules", "-m", MODEL, "--model-arg", "depth=2")
    assert arg.exit_code == 2 and "CLIPVisionCfg" in arg.stderr and "layers" in arg.stderr
    offline = cli(
        "capture",
        "-m",
        "open_clip:ViT-B-32:openai",
        "--pretrained",
        chelsea,
        "-l",
        "visual",
        "-o",
        tmp_path / "x",
    )
    assert offline.exit_code == 4 and "Could not get open_clip's pretrained weights" in offline.stderr
    assert not (tmp_path / "x").exists()
    for result in (unknown, untagged, no_tag, arg, offline):
        assert "Traceback" not in result.stderr
    monkeypatch.setitem(sys.modules, "open_clip", None)
    gone = cli("list-modules", "-m", MODEL)
    assert gone.exit_code == 4 and "pip install -e '.[open_clip]'" in gone.stderr


def test_resume_and_shards_give_the_uninterrupted_values(
    clip: tuple[torch.nn.Module, object, Path], captured: Path, tmp_path: Path
) -> None:
    photos = [str(SKIMAGE_DATA / p) for p in PHOTOS]
    spec = ModelSpec(MODEL, checkpoint=clip[2])
    for how, got in resumed_and_sharded(spec, photos, "visual", tmp_path).items():
        np.testing.assert_allclose(got, np.load(captured / "visual.npy"), rtol=0, atol=1e-5, err_msg=how)
