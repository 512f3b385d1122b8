"""Issue 35's messages that pointed the wrong way (items 11, 13, 14), through the real console script: each
names what the user has (that model's attention modules, its class token, the inputs that differ) and
stderr holds hookdump's own words only."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import warnings
from pathlib import Path

import forkrun
import numpy as np
import pytest
import timm
import torch
import torchvision
import transformers
from common import SKIMAGE_DATA, paragraph
from helpers import torchvision_input


def hd(tmp_path: Path, *args: object) -> subprocess.CompletedProcess[str]:
    return forkrun.run(args, cwd=tmp_path)


# --- 11: --attention and --reduce cls speak of the model in hand -----------------------------------------


def test_attention_hint_names_the_models_own_attention_modules(tmp_path: Path, chelsea: Path) -> None:
    done = hd(tmp_path, "capture", "-m", "vit_tiny_patch16_224", "--attention", "-l", "blocks.0", chelsea)
    assert done.returncode == 3, done.stderr
    paragraph(done.stderr, "none of the layers asked for", "-l 'blocks.*.attn' (12 of them: blocks.0.attn")
    clip = ("capture", "-m", "open_clip:ViT-S-32", "--attention", "-l", "visual.transformer.resblocks.0")
    done = hd(tmp_path, *clip, chelsea)
    assert done.returncode == 3, done.stderr
    text = paragraph(done.stderr, "visual.transformer.resblocks.0.attn, ", "MultiheadAttention", "fused call")
    assert "-l 'visual.transformer.resblocks.*.attn'" in text and "blocks.*.attn'" not in text.split("(-l")[0]
    assert not (tmp_path / "hookdump-out").exists()


def _meta_model(name: str) -> torch.nn.Module:
    """A timm (or ``tv:``) model built by its own library on the meta device: no weights, its module names."""
    with torch.device("meta"):
        if name.startswith("tv:"):
            return torchvision.models.get_model(name[3:], weights=None)
        return timm.create_model(name)


@pytest.mark.parametrize(
    ("model", "layer", "kind", "glob"),
    [  # numbers inside a path's segment; stages 0 and 1 of CAFormer mix by convolution, not attention
        ("tv:vit_b_32", "encoder.ln", "MultiheadAttention", "encoder.layers.encoder_layer_*.self_attention"),
        ("caformer_s18", "stages.0", "Attention", "stages.[23].blocks.*.token_mixer"),
    ],
)
def test_attention_hint_globs_exactly_the_models_attention_modules(
    tmp_path: Path, chelsea: Path, model: str, layer: str, kind: str, glob: str
) -> None:
    """The hint's glob picks the model's attention modules and nothing else, as its own library names them
    (before: the first module alone for torchvision's ViT, and every stage's token mixer for CAFormer)."""
    done = hd(tmp_path, "capture", "-m", model, "--attention", "-l", layer, chelsea)
    assert done.returncode == 3, done.stderr
    text = paragraph(done.stderr, f"-l '{glob}'", f"of {model} whose attention weights")
    assert "blocks.*.attn" not in text
    expected = [n for n, m in _meta_model(model).named_modules() if type(m).__name__ == kind]
    assert len(expected) == 12
    unfuse = ("--attention",) if kind == "Attention" else ()  # torchvision's are fused for good
    done = hd(tmp_path, "capture", "-m", model, *unfuse, "-l", glob, chelsea, "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    planned = [m["name"] for m in json.loads(done.stdout)]
    assert [n for n in planned if not n.endswith(".attn_drop")] == expected


def test_reduce_cls_on_a_model_without_a_class_token_names_that_model(tmp_path: Path, chelsea: Path) -> None:
    """A Swin block (its tokens) and a Swin stage (its tokens and a map: before, told it held no token map)
    are refused for what the model lacks."""
    folder = tmp_path / "swin"
    transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2], window_size=4
    ).save_pretrained(folder)
    for layer in ("encoder.layers.0.blocks.0", "encoder.layers.0"):
        done = hd(tmp_path, "capture", "-m", f"hf:{folder}", "-l", layer, "--reduce", "cls", chelsea)
        assert done.returncode == 2, done.stderr
        text = paragraph(
            done.stderr, f"--reduce cls takes the class token, and hf:{folder} has none", "--reduce mean"
        )
        assert "timm" not in text


def test_reduce_cls_on_a_layer_without_tokens_names_the_layer(tmp_path: Path, chelsea: Path) -> None:
    """ViTModel has a class token, and its pooler's (N, C) output holds no token map: the layer is named."""
    folder = tmp_path / "vit"
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32
    )
    transformers.ViTModel(config).save_pretrained(folder)
    done = hd(tmp_path, "capture", "-m", f"hf:{folder}", "-l", "pooler", "--reduce", "cls", chelsea)
    assert done.returncode == 2, done.stderr
    text = paragraph(
        done.stderr, "--reduce cls takes the first token of (N, L, C) token maps; none of pooler is one"
    )
    assert "timm" not in text and "class token" not in text


def test_reduce_cls_on_the_patch_tokens_alone_is_refused(tmp_path: Path, chelsea: Path) -> None:
    """The patch embedding's tokens come before the class token joins them: their first token is a patch,
    which --reduce cls saved as the class token before (a silent wrong value). timm's ViT and an hf ViT;
    a block of the same model (class token first) runs."""
    folder = tmp_path / "vit"
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32
    )
    transformers.ViTModel(config).save_pretrained(folder)
    for model, layer, patches in [
        ("vit_tiny_patch16_224", "patch_embed", 196),
        (f"hf:{folder}", "embeddings.patch_embeddings", 4),
    ]:
        done = hd(tmp_path, "capture", "-m", model, "-l", layer, "--reduce", "cls", "--dry-run", chelsea)
        assert done.returncode == 2, done.stderr
        paragraph(done.stderr, f"{layer} holds the {patches} patch tokens alone", "--reduce mean")
    done = hd(tmp_path, "capture", "-m", "vit_tiny_patch16_224", "-l", "blocks.0", "--reduce", "cls", chelsea)
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "hookdump-out" / "blocks.0.npy").shape == (1, 192)


def test_feat_levels_on_a_tv_model_without_them_speak_of_that_model(tmp_path: Path, chelsea: Path) -> None:
    """tv:alexnet declares no stages: the refusal names it, not timm's feature_info alone."""
    done = hd(tmp_path, "capture", "-m", "tv:alexnet", "-l", "feat:0", "--dry-run", chelsea)
    assert done.returncode == 3, done.stderr
    paragraph(done.stderr, "tv:alexnet has no feature levels", "torchvision", "list-modules tv:alexnet")


# --- 13: torchvision's FutureWarning stays off stderr, the weights as torchvision's default makes them -----


@pytest.mark.parametrize(("name", "layer"), [("googlenet", "inception3a"), ("inception_v3", "Mixed_5b")])
def test_tv_models_that_warn_keep_stderr_to_our_words(
    tmp_path: Path, chelsea: Path, name: str, layer: str
) -> None:
    listed = hd(tmp_path, "list-modules", "-m", f"tv:{name}", "--filter", layer)
    assert listed.returncode == 0 and layer in listed.stdout and listed.stderr == "", listed.stderr
    done = hd(tmp_path, "capture", "-m", f"tv:{name}", "-l", layer, chelsea, "-o", "out")
    assert done.returncode == 0, done.stderr
    assert all(line.startswith("note: ") for line in done.stderr.splitlines()), done.stderr
    assert "Warning" not in done.stderr
    if name != "googlenet":
        return
    torch.manual_seed(0)  # hookdump's --seed 0, and torchvision's default init (init_weights=None warns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = torchvision.models.get_model(name, weights=None).eval()
    kept: list[torch.Tensor] = []
    handle = model.get_submodule(layer).register_forward_hook(
        lambda m, a, out: kept.append(out.detach().clone())
    )
    try:
        with torch.no_grad():
            model(torchvision_input(chelsea))
    finally:
        handle.remove()
    # Within float32 rounding, not bit for bit: under pytest -n this process computes with one thread and
    # the console script with the machine's, and on some CPUs (AMD EPYC) oneDNN's sums then differ in order.
    np.testing.assert_allclose(
        np.load(tmp_path / "out" / f"{layer}.npy"), kept[0].numpy(), rtol=1e-5, atol=1e-7
    )


# --- 14: two captures of other inputs: the first input that differs, on each side --------------------------


def test_compare_and_diff_name_the_first_input_that_differs(tmp_path: Path) -> None:
    photos = tmp_path / "p"
    photos.mkdir()
    for name in ("chelsea.png", "coffee.png", "astronaut.png"):
        shutil.copy(SKIMAGE_DATA / name, photos / name)
    tiny = ("-m", "test_resnet", "--input-size", "3,32,32", "-l", "layer1", "-q")
    runs = {"a": ("chelsea.png", "coffee.png"), "b": ("chelsea.png", "astronaut.png"), "c": ("chelsea.png",)}
    for out, names in runs.items():
        assert hd(tmp_path, "capture", *tiny, *[photos / n for n in names], "-o", out).returncode == 0
    sha = {n: hashlib.sha256((photos / n).read_bytes()).hexdigest()[:12] for n in runs["b"] + ("coffee.png",)}
    for command in ("compare", "diff"):
        done = hd(tmp_path, command, "a", "b")
        assert done.returncode == 4, done.stderr
        paragraph(
            done.stderr,
            f"input 1 differs: {photos / 'coffee.png'} (sha256 {sha['coffee.png']}...) in `a`,",
            f"{photos / 'astronaut.png'} (sha256 {sha['astronaut.png']}...) in `b`",
            "--allow-different-inputs",
        )
        done = hd(tmp_path, command, "c", "a")
        assert done.returncode == 4, done.stderr
        paragraph(
            done.stderr,
            "`c` holds 1 input(s), `a` 2: the first 1 are the same, then `a` has input 1,",
            f"{photos / 'coffee.png'} (sha256 {sha['coffee.png']}...)",
        )
