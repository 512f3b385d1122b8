"""Issue 35 item 8: ``capture --dry-run`` is the run's own preflight (``api.plan``, which ``api.capture``
runs before its first batch), so the two cannot disagree: every documented error, run both ways through the
real console script, ends with the same exit code and the same error paragraph, and writes nothing. Item 10,
an API case: a caller's ``transform=`` that gives images of several sizes, refused naming which input had
which size (by the dry run too), or, one image a batch, captured where every tensor keeps one shape."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import forkrun
import numpy as np
import pytest
import timm
import torch
import transformers
from common import SKIMAGE_DATA
from helpers import fill_hub_cache, hub_unreachable, seeded_net
from PIL import Image
from safetensors.torch import save_file
from torchvision import transforms as T

from hookdump import api
from hookdump.errors import HookdumpError, InputError, UsageError

TINY = ("-m", "test_resnet", "--input-size", "3,32,32")


def _hf_vit(tmp: Path) -> None:
    """A tiny transformers ViTModel: its output is hidden states, not class scores."""
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    transformers.ViTModel(config).save_pretrained(tmp / "vit")


def _other_checkpoint(tmp: Path) -> None:
    save_file(timm.create_model("resnet18").state_dict(), str(tmp / "other.safetensors"))


def _text_checkpoint(tmp: Path) -> None:
    (tmp / "bad.safetensors").write_text("not tensors\n")


def _unreadable_photo(tmp: Path) -> None:
    (tmp / "text.png").write_text("not an image\n")


def _in_the_way(tmp: Path) -> None:
    (tmp / "out").mkdir()
    (tmp / "out" / "layer1.npy").write_bytes(b"mine")


def _out_is_a_file(tmp: Path) -> None:
    (tmp / "out").write_bytes(b"mine")


def _download_refused(tmp: Path) -> dict[str, str]:
    """torch.hub's cache empty (made here: torch.hub makes it on a download) and every download refused (a
    proxy on a closed port)."""
    refuse = "http://127.0.0.1:9"
    (tmp / "torch" / "hub" / "checkpoints").mkdir(parents=True)
    return {**os.environ, "TORCH_HOME": str(tmp / "torch"), "HTTPS_PROXY": refuse, "https_proxy": refuse,
            "NO_PROXY": "", "no_proxy": ""}  # fmt: skip


#: Makes what a case needs in its folder; returns the environment to run in, or None for this one.
Setup = Callable[[Path], dict[str, str] | None] | None
CASES: list[tuple[str, int, tuple[str, ...], Setup]] = [
    ("unknown-layer", 3, (*TINY, "-l", "nosuch", "--random-input"), None),
    ("container", 3, ("-m", "twins_svt_small", "-l", "pos_block", "--random-input"), None),
    ("never-fires", 3, ("-m", "vit_tiny_patch16_224", "-l", "blocks.0.attn.attn_drop", "--random-input"),
     None),
    ("call-out-of-range", 3, (*TINY, "-l", "layer1@3", "--random-input"), None),
    ("grad-without-scores", 3, ("-m", "hf:vit", "-l", "layers.1", "--grad", "--sample"), _hf_vit),
    ("target-not-a-class", 2, (*TINY, "-l", "layer1", "--grad", "--target", "5000", "--random-input"), None),
    ("unknown-model", 4, ("-m", "resnet5O", "-l", "layer1", "--random-input"), None),
    ("checkpoint-not-tensors", 4, (*TINY, "-l", "layer1", "--checkpoint", "bad.safetensors", "--sample"),
     _text_checkpoint),
    ("checkpoint-of-another-model", 4,
     (*TINY, "-l", "layer1", "--checkpoint", "other.safetensors", "--sample"),
     _other_checkpoint),
    ("format", 2, (*TINY, "-l", "layer1", "--format", "xyz", "--random-input"), None),
    ("reduce-cls-on-a-cnn", 2, (*TINY, "-l", "layer1", "--reduce", "cls", "--random-input"), None),
    ("compile-with-grad", 2, (*TINY, "-l", "layer1", "--grad", "--compile", "--random-input"), None),
    ("input-missing", 4, (*TINY, "-l", "layer1", "nowhere.png"), None),
    ("input-not-an-image", 4, (*TINY, "-l", "layer1", "text.png"), _unreadable_photo),
    ("out-in-the-way", 2, (*TINY, "-l", "layer1", "--random-input"), _in_the_way),
    ("out-is-a-file", 2, (*TINY, "-l", "layer1", "--random-input"), _out_is_a_file),
    ("pretrained-not-to-be-had", 4, (*TINY, "-l", "layer1", "--pretrained", "--random-input"),
     hub_unreachable),
    ("tv-pretrained-not-to-be-had", 4, ("-m", "tv:resnet18", "-l", "fc", "--pretrained", "--random-input"),
     _download_refused),
]  # fmt: skip


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    """The error paragraph, without the notes before it."""
    assert "Traceback" not in proc.stderr and proc.stderr.count("error: ") == 1, proc.stderr
    return proc.stderr.partition("error: ")[2].strip()


@pytest.mark.parametrize(("code", "args", "setup"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_dry_run_and_run_refuse_alike(tmp_path: Path, code: int, args: tuple[str, ...], setup: Setup) -> None:
    env = setup(tmp_path) if setup is not None else None
    before = sorted(p.name for p in tmp_path.rglob("*"))
    run = forkrun.run(["capture", *args, "-o", "out"], cwd=tmp_path, env=env)
    dry = forkrun.run(["capture", *args, "-o", "out", "--dry-run"], cwd=tmp_path, env=env)
    assert (run.returncode, dry.returncode) == (code, code), (run.stderr, dry.stderr)
    assert _error(run) == _error(dry)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # neither wrote anything


def test_a_dry_run_that_passes_is_a_run_that_runs(tmp_path: Path) -> None:
    """The other way round: what --dry-run lets through, the run captures (the same tree, layers, sizes)."""
    photo = SKIMAGE_DATA / "chelsea.png"
    dry = forkrun.run(
        ["capture", *TINY, "-l", "layer1", "--grad", photo, "-o", "out", "--dry-run"], cwd=tmp_path
    )
    assert dry.returncode == 0 and "layer1" in dry.stdout, dry.stderr
    run = forkrun.run(["capture", *TINY, "-l", "layer1", "--grad", photo, "-o", "out"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "inputs.parquet",
        "layer1.grad.npy",
        "layer1.npy",
        "manifest.json",
    ]


def test_pretrained_weights_in_the_cache_pass_the_dry_run_and_the_run(tmp_path: Path) -> None:
    """The other side of the two cases above: the hub still unreachable, the weights in its cache (filled
    by hand, nothing downloaded): both go through."""
    fill_hub_cache(tmp_path, seed=5)
    args = ["capture", *TINY, "-l", "fc", "--pretrained", "--random-input", "-o", "out"]
    env = hub_unreachable(tmp_path)
    dry = forkrun.run([*args, "--dry-run"], cwd=tmp_path, env=env)
    assert dry.returncode == 0 and "would hook 1 module(s)" in dry.stdout, dry.stderr
    assert not (tmp_path / "out").exists()
    run = forkrun.run(args, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert "note: weights: timm pretrained (from the local cache:" in run.stderr


# --- item 10: a caller's transform= that gives images of several sizes ------------------------------------

#: No crop: each photo keeps its aspect ratio, so the sizes differ (astronaut is square, chelsea and coffee
#: are not).
LOOSE = T.Compose([T.Resize(32), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])


@pytest.fixture
def mixed(tmp_path: Path) -> list[Path]:
    """Three photos in this order: 512x512, then two of 451x300 and 600x400 (both 3:2)."""
    photos = tmp_path / "p"
    photos.mkdir()
    for i, name in enumerate(("astronaut.png", "chelsea.png", "coffee.png")):
        shutil.copy(SKIMAGE_DATA / name, photos / f"{i}-{name}")
    return sorted(photos.iterdir())


def _both(call: Callable[[], object]) -> HookdumpError:
    with pytest.raises(HookdumpError) as refused:
        call()
    return refused.value


def test_inputs_of_several_sizes_in_one_batch_are_refused_naming_each_size(
    tmp_path: Path, mixed: list[Path]
) -> None:
    """Not torch.stack's RuntimeError: which input had which size and the fix, the same from the dry run
    (``api.plan``), which runs the transform as the run does, and from the run; nothing written."""
    a, b, c = (f"`{p}`" for p in mixed)
    kw = {"model": seeded_net(), "transform": LOOSE, "out": tmp_path / "o", "batch_size": 3, "workers": 0}
    dry = _both(lambda: api.plan(["head"], images=[str(mixed[0].parent)], **kw))
    run = _both(lambda: api.capture([str(mixed[0].parent)], ["head"], **kw))
    assert isinstance(run, InputError) and run.exit_code == 4
    assert (dry.message, dry.hint) == (run.message, run.hint)
    assert f"{a}: (3, 32, 32); {b}, {c}: (3, 32, 48)" in run.message
    assert "Resize(256) then CenterCrop(224)" in (run.hint or "") and "batch_size=1" in (run.hint or "")
    assert not (tmp_path / "o").exists()


def test_one_image_a_batch_takes_several_sizes_where_each_tensor_keeps_one_shape(
    tmp_path: Path, mixed: list[Path]
) -> None:
    """``head`` follows a global pool: (5,) whatever the size. Its rows equal the module run by hand on each
    photo as the transform made it; the note, in the plan and the run, names the sizes."""
    net = seeded_net()
    done = api.capture([str(p) for p in mixed], ["head"], model=net, transform=LOOSE, out=tmp_path / "o",
                       batch_size=1, workers=0)  # fmt: skip
    alone = copy.deepcopy(net).eval()
    with torch.no_grad():
        expected = [alone(LOOSE(Image.open(p).convert("RGB"))[None])[0].numpy() for p in mixed]
    np.testing.assert_allclose(np.load(tmp_path / "o" / "head.npy"), np.stack(expected), rtol=1e-5, atol=1e-6)
    a, b, c = (f"`{p}`" for p in mixed)
    said = f"inputs of 2 sizes, each run alone (batch_size=1): {a}: (3, 32, 32); {b}, {c}: (3, 32, 48)"
    assert f"transform= made {said}" in done.notes
    planned = api.plan(["head"], model=net, images=[str(p) for p in mixed], transform=LOOSE,
                       out=tmp_path / "p", batch_size=1)  # fmt: skip
    assert any(n.startswith(f"transform= makes {said}") for n in planned.notes), planned.notes


def test_one_image_a_batch_refuses_a_tensor_that_follows_the_size_naming_the_input(
    tmp_path: Path, mixed: list[Path]
) -> None:
    """``stem``'s map is as large as the image: the second photo's would not fit the first's file. Said as
    the input's error (its size against the first's), not a layer's; nothing written."""
    kw = {"model": seeded_net(), "transform": LOOSE, "out": tmp_path / "o", "batch_size": 1, "workers": 0}
    refused = _both(lambda: api.capture([str(p) for p in mixed], ["stem"], **kw))
    assert isinstance(refused, InputError) and refused.exit_code == 4
    assert refused.message == (
        f"transform= made `{mixed[1]}` (3, 32, 48), another size than the first input's (`{mixed[0]}`: (3,"
        " 32, 32)), and the shape of `stem` follows it: (8, 32, 48) for this input, (8, 32, 32) for those"
        " before. Each tensor's file holds one shape."
    )
    assert "reduce='mean'" in (refused.hint or "") and "CenterCrop" in (refused.hint or "")
    assert not (tmp_path / "o").exists()
    kept = api.capture([str(p) for p in mixed], ["stem"], **{**kw, "reduce": "mean"})  # pooled: one shape
    assert np.load(kept.out / "stem.npy").shape == (3, 8)


def test_one_image_a_batch_of_a_size_the_model_cannot_take_blames_the_input(
    tmp_path: Path, mixed: list[Path]
) -> None:
    """A ViT built for 32x32 only asserts its input size: the error names the photo and its size, not the
    module that refused it."""
    vit = timm.create_model("test_vit", img_size=32, patch_size=8, dynamic_img_size=False)
    refused = _both(lambda: api.capture([str(p) for p in mixed], ["blocks.0"], model=vit, transform=LOOSE,
                                        out=tmp_path / "o", batch_size=1, workers=0))  # fmt: skip
    assert isinstance(refused, InputError) and refused.exit_code == 4
    assert refused.message.startswith(
        f"transform= made `{mixed[1]}` (3, 32, 48), another size than the first input's (`{mixed[0]}`: (3,"
        " 32, 32)), and module:timm.models.vision_transformer.VisionTransformer cannot take it:"
        " AssertionError: Input width (48) doesn't match model (32)."
    )
    assert "one the model takes" in (refused.hint or "")
    assert not (tmp_path / "o").exists()


def test_an_input_size_the_transform_does_not_make_is_refused(tmp_path: Path, mixed: list[Path]) -> None:
    images = api.InputSpec(paths=(str(mixed[0]),), input_size=(3, 64, 64))
    kw = {"model": seeded_net(), "images": images, "transform": LOOSE, "out": tmp_path / "o"}
    refused = _both(lambda: api.plan(["head"], **kw))
    assert isinstance(refused, UsageError)
    assert refused.message == (
        f"transform= made (3, 32, 32) of `{mixed[0]}`, and the input size given is (3, 64, 64)."
    )
