"""hf:FOLDER, a Hugging Face transformers model saved by save_pretrained: one tiny ViT classifier (random
weights from a config) captured once through the console script, checked against transformers itself
(output_hidden_states, output_attentions on an eager copy, the image processor's pixel_values)."""

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

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.model_source

from hookdump import api  # noqa: E402
from hookdump.errors import InputError, LayerError, UsageError  # noqa: E402
from hookdump.inputs.transforms import eval_transform, fixed_config  # noqa: E402
from hookdump.model import attention, sources  # noqa: E402
from hookdump.model.sources.hf import transform as hf_transform  # noqa: E402
from hookdump.model.spec import ModelSpec  # noqa: E402

PHOTOS = ("chelsea.png", "coffee.png")
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


@pytest.fixture(scope="module")
def vit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ViTForImageClassification (3 classes, seeded random weights) and its ViTImageProcessor."""
    folder = tmp_path_factory.mktemp("hf") / "vit"
    config = transformers.ViTConfig(**TINY, image_size=32, patch_size=8, num_labels=3)
    torch.manual_seed(0)
    transformers.ViTForImageClassification(config).save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def captured(vit: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One capture through the installed console script: every hidden state, layer 1's attention, grads."""
    out = tmp_path_factory.mktemp("hf-out") / "out"
    exe = shutil.which("hookdump", path=str(Path(sys.executable).parent))
    assert exe is not None
    photos = [str(SKIMAGE_DATA / p) for p in PHOTOS]
    layers = ["-l", "feat:*", "-l", "vit.layers.1.attention", "--attention", "--grad"]
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [exe, "capture", "-m", f"hf:{vit}", *photos, *layers, "-o", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "vit.layers.1.attention.attn.npy" in proc.stdout and "(2, 2, 17, 17)" in proc.stdout
    assert "weights: " + str(vit / "model.safetensors") in proc.stderr
    assert "the 1 hooked attention module(s) run transformers' eager path" in proc.stderr  # not the other
    return out


def pixels(vit: Path) -> torch.Tensor:
    """The photos as hookdump prepares them for the model (its own loader's transform)."""
    source = sources.resolve(ModelSpec(f"hf:{vit}"))
    config, _ = source.preprocess(())
    made = eval_transform(fixed_config(config, None))
    return torch.stack([made(Image.open(SKIMAGE_DATA / p).convert("RGB")) for p in PHOTOS])


def test_feat_k_is_the_kth_hidden_state(vit: Path, captured: Path) -> None:
    model = transformers.ViTForImageClassification.from_pretrained(vit).eval()
    with torch.no_grad():
        hidden = model(pixels(vit), output_hidden_states=True).hidden_states
    files = ["vit.embeddings", "vit.layers.0", "vit.layers.1"]
    assert len(hidden) == len(files)
    for state, name in zip(hidden, files, strict=True):
        np.testing.assert_allclose(np.load(captured / f"{name}.npy"), state.numpy(), rtol=0, atol=1e-5)
    levels = [json.loads((captured / "manifest.json").read_text())["model"]]
    assert levels[0]["source"] == "hf" and levels[0]["class"] == "transformers.ViTForImageClassification"


def test_attention_is_output_attentions_of_an_eager_copy(vit: Path, captured: Path) -> None:
    eager = transformers.ViTForImageClassification.from_pretrained(vit, attn_implementation="eager").eval()
    with torch.no_grad():
        weights = eager(pixels(vit), output_attentions=True).attentions
    np.testing.assert_allclose(
        np.load(captured / "vit.layers.1.attention.attn.npy"), weights[1].numpy(), rtol=0, atol=1e-6
    )
    assert not (captured / "vit.layers.0.attention.attn.npy").exists()


def test_only_the_hooked_layer_leaves_sdpa_and_the_output_stays(vit: Path) -> None:
    model, _ = sources.resolve(ModelSpec(f"hf:{vit}")).load()
    x = pixels(vit)
    with torch.no_grad():
        fused = model(x)
    attention.unfuse(model)
    ran: dict[str, str] = {}
    for name in ("vit.layers.0.attention", "vit.layers.1.attention"):
        module = model.get_submodule(name)
        module.register_forward_pre_hook(lambda m, a, n=name: ran.update({n: m.config._attn_implementation}))
    handle = model.get_submodule("vit.layers.1.attention.attn_drop").register_forward_hook(lambda *a: None)
    try:
        with torch.no_grad():
            mixed = model(x)
    finally:
        handle.remove()
    assert ran == {"vit.layers.0.attention": "sdpa", "vit.layers.1.attention": "eager"}
    assert (mixed - fused).abs().max() < 1e-5


def test_the_processor_pixel_values_within_1_255(vit: Path) -> None:
    processor = transformers.AutoImageProcessor.from_pretrained(vit)
    std = torch.tensor(processor.image_std)[:, None, None]
    ours = pixels(vit)
    for index, name in enumerate(PHOTOS):
        theirs = processor(images=Image.open(SKIMAGE_DATA / name).convert("RGB"), return_tensors="pt")
        assert ((theirs["pixel_values"][0] - ours[index]).abs() * std).max() <= 1 / 255 + 1e-5
    # a shorter-side resize and center crop (CLIP's, DINOv2's): torchvision's resize-and-crop
    clip = transformers.CLIPImageProcessor(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32})
    config, notes = hf_transform.from_processor(clip, 3, "CLIPImageProcessor")
    assert config["resize"] == 40 and config["input_size"] == (3, 32, 32) and "center crop 32x32" in notes[0]
    made, std = eval_transform(config), torch.tensor(clip.image_std)[:, None, None]
    for name in ("astronaut.png", *PHOTOS):
        image = Image.open(SKIMAGE_DATA / name).convert("RGB")
        theirs = clip(images=image, return_tensors="pt")["pixel_values"][0]
        assert ((theirs - made(image)).abs() * std).max() <= 1 / 255 + 1e-5


def test_manifest_says_what_was_loaded_and_the_transform(vit: Path, captured: Path) -> None:
    manifest = json.loads((captured / "manifest.json").read_text())
    model, transform = manifest["model"], manifest["transform"]
    assert model["folder"] == str(vit) and model["weights"]["file"] == str(vit / "model.safetensors")
    assert len(model["weights"]["sha256"]) == 64 and model["num_prefix_tokens"] == 1 and model["class_token"]
    assert transform["input_size"] == [3, 32, 32] and transform["crop_mode"] == "squash"
    assert transform["mean"] == [0.5, 0.5, 0.5] and transform["interpolation"] == "bilinear"


def test_grad_is_autograd_of_the_top_class(vit: Path, captured: Path) -> None:
    model = transformers.ViTForImageClassification.from_pretrained(vit).eval()
    kept: list[torch.Tensor] = []

    def keep(module: torch.nn.Module, args: object, out: torch.Tensor) -> None:
        out.retain_grad()
        kept.append(out)

    model.vit.layers[0].register_forward_hook(keep)
    logits = model(pixels(vit)).logits
    logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
    grad = kept[0].grad
    assert grad is not None
    np.testing.assert_allclose(np.load(captured / "vit.layers.0.grad.npy"), grad.numpy(), rtol=0, atol=1e-6)


def test_show_and_report_read_the_capture(cli, captured: Path, tmp_path: Path) -> None:
    shown = cli("show", captured, "--key", "vit.layers.1.attention.attn", "-o", tmp_path / "attn.png")
    assert shown.exit_code == 0, shown.stderr
    assert list(tmp_path.glob("attn*.png"))
    assert cli("report", captured).exit_code == 0
    assert "vit.layers.0" in (captured / "index.html").read_text()


def test_list_modules_globs_calls_and_containers(cli, vit: Path, chelsea: Path) -> None:
    listed = cli("list-modules", "-m", f"hf:{vit}")
    assert listed.exit_code == 0, listed.stderr
    for line in ("vit.layers.0.attention.q_proj  Linear", "vit.layers  ModuleList  [container", "feat:2"):
        assert line in listed.stdout
    found = api.plan(["vit.layers.*.mlp", "vit.layers.0.dropout@1"], model=f"hf:{vit}", images=[str(chelsea)])
    assert sorted((t.path, t.call or 0) for t in found.targets) == [
        ("vit.layers.0.dropout", 1), ("vit.layers.0.mlp", 0), ("vit.layers.1.mlp", 0)
    ]  # fmt: skip
    with pytest.raises(LayerError, match=r"`layers\.0` is not a module"):  # paths as named_modules()
        api.plan(["layers.0"], model=f"hf:{vit}", images=[str(chelsea)])
    refused = cli("capture", "-m", f"hf:{vit}", chelsea, "-l", "vit.layers")
    assert refused.exit_code == 3 and "vit.layers.0, vit.layers.1" in refused.stderr


def test_reduce_cls_is_the_class_token(vit: Path, captured: Path, chelsea: Path, tmp_path: Path) -> None:
    api.capture([str(SKIMAGE_DATA / p) for p in PHOTOS], ["vit.layers.1"], model=f"hf:{vit}", out=tmp_path,
                reduce="cls")  # fmt: skip
    first = np.load(captured / "vit.layers.1.npy")[:, 0]
    np.testing.assert_allclose(np.load(tmp_path / "vit.layers.1.npy"), first, rtol=0, atol=1e-5)


def test_a_swin_without_weights_or_processor(tmp_path: Path, chelsea: Path) -> None:
    folder = tmp_path / "swin"
    transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2], window_size=4
    ).save_pretrained(folder)
    found = api.plan(["feat:0"], model=f"hf:{folder}", images=[str(chelsea)])
    assert any("ImageNet's defaults at the config's image_size" in n for n in found.notes)
    assert found.config["input_size"] == (3, 32, 32) and found.config["resize"] == 36
    with pytest.raises(UsageError, match=f"takes the class token, and hf:{folder} has none"):
        api.plan(["encoder.layers.0.blocks.0"], model=f"hf:{folder}", images=[str(chelsea)], reduce="cls")
    _, said = sources.resolve(ModelSpec(f"hf:{folder}")).load()
    assert "weights: random init from --seed 0" in said[0]


def test_checkpoint_onto_the_config_model(vit: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    state = transformers.ViTForImageClassification.from_pretrained(vit).state_dict()
    good, bad = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    save_file({k: v * 2 for k, v in state.items()}, str(good))
    save_file({k: v for k, v in state.items() if "classifier" not in k}, str(bad))
    model, said = sources.resolve(ModelSpec(f"hf:{vit}", checkpoint=good)).load()
    assert said[0].startswith(f"weights: {good} onto ViTForImageClassification")
    assert torch.equal(model.state_dict()["classifier.weight"], state["classifier.weight"] * 2)
    with pytest.raises(InputError, match="classifier") as refused:
        api.plan(["vit.layers.0"], model=ModelSpec(f"hf:{vit}", checkpoint=bad))
    assert "-m hf:FOLDER" in str(refused.value.hint)


def test_errors_are_one_paragraph(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    offline = cli("list-modules", "-m", "hf:nobody/no-such-model")
    assert offline.exit_code == 4 and "not in the Hugging Face cache" in offline.stderr
    assert "save_pretrained" in offline.stderr and "Traceback" not in offline.stderr
    missing = cli("list-modules", "-m", f"hf:{tmp_path / 'absent'}")
    assert missing.exit_code == 4 and "is not a folder" in missing.stderr
    monkeypatch.setitem(sys.modules, "transformers", None)
    gone = cli("list-modules", "-m", "hf:google/vit-base-patch16-224")
    assert gone.exit_code == 4 and "pip install -e '.[hf]'" in gone.stderr


def test_resume_and_shards_give_the_uninterrupted_values(vit: Path, captured: Path, tmp_path: Path) -> None:
    photos = [str(SKIMAGE_DATA / p) for p in PHOTOS]
    expected = np.load(captured / "vit.layers.1.npy")
    for how, got in resumed_and_sharded(f"hf:{vit}", photos, "vit.layers.1", tmp_path).items():
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=how)
