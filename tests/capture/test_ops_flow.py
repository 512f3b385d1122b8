"""Issue 37: an op value (``PATH:OP``) goes everywhere a layer goes, through the real console script: every
format, --reduce, --save-dtype, workers, --resume after a kill, --shard and merge, torchrun, --grad, and
each reader (show, stats, diff, compare, top, report, ``hookdump.open``); its errors name the module's ops."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
import timm
import torch
from common import SKIMAGE_DATA, paragraph, torchrun
from helpers import photo_batch, seeded

import hookdump

MODEL = ("-m", "test_vit", "--seed", "3")
OPS = ("-l", "blocks.0:add", "-l", "blocks.[01]:add_1")
NAMES = ["blocks.0:add", "blocks.0:add_1", "blocks.1:add_1"]
FILES = ["blocks.0+add", "blocks.0+add_1", "blocks.1+add_1"]


def hd(cwd: Path, *args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forkrun.run(args, cwd=cwd, env=env)


def _photos(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    names = ["chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg", "coins.png", "camera.png"]
    for i in range(count):
        shutil.copy(SKIMAGE_DATA / names[i % len(names)], folder / f"{i:02d}-{names[i % len(names)]}")
    return folder


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Six photos and their capture of three op values, in batches of two: the reference of every test."""
    root = tmp_path_factory.mktemp("ops")
    photos = _photos(root / "photos", 6)
    done = hd(
        root, "capture", *MODEL, *OPS, photos, "--batch-size", "2", "--workers", "0", "-o", root / "whole"
    )
    assert done.returncode == 0, done.stderr
    return photos, root / "whole"


def _arrays(out: Path) -> dict[str, np.ndarray]:
    capture = hookdump.open(out)
    return {name: np.array(capture[name]) for name in capture}


def test_files_names_and_manifest(whole: tuple[Path, Path]) -> None:
    """``:`` becomes ``+`` in file names only: the manifest's layer, ``hookdump.open``'s keys and the
    printed table keep the op's name."""
    _, out = whole
    names = [f"{f}.npy" for f in FILES] + ["inputs.parquet", "manifest.json"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["layer"] for e in manifest["tensors"]] == NAMES
    assert list(hookdump.open(out)) == NAMES
    assert all(hookdump.open(out)[n].shape == (6, 101, 64) for n in NAMES)


def test_formats_workers_save_dtype_and_reduce_keep_the_values(
    tmp_path: Path, whole: tuple[Path, Path]
) -> None:
    photos, reference = whole
    want = _arrays(reference)
    out = tmp_path / "all"
    args = (
        "capture",
        *MODEL,
        *OPS,
        photos,
        "--batch-size",
        "3",
        "--workers",
        "2",
        "--format",
        "npy,pt,safetensors",
    )
    done = hd(tmp_path, *args, "-o", out)
    assert done.returncode == 0, done.stderr
    for name, value in want.items():
        np.testing.assert_array_equal(np.array(hookdump.open(out)[name]), value)
        stem = name.replace(":", "+")
        np.testing.assert_array_equal(torch.load(out / f"{stem}.pt").numpy(), value)
    from safetensors.numpy import load_file

    keys = load_file(out / "tensors.safetensors")
    assert sorted(keys) == sorted(NAMES)  # the safetensors key is the op's name itself
    assert np.array_equal(keys["blocks.0:add"], want["blocks.0:add"])
    done = hd(tmp_path, *args[:-4], "--save-dtype", "float16", "--reduce", "mean", "-o", tmp_path / "small")
    assert done.returncode == 0, done.stderr
    small = _arrays(tmp_path / "small")
    for name, value in want.items():  # the class token left out of the mean, as timm's avg pooling does
        expected = value[:, 1:].astype(np.float64).mean(axis=1).astype(np.float32).astype(np.float16)
        assert small[name].dtype == np.float16 and small[name].shape == (6, 64)
        np.testing.assert_allclose(
            small[name].astype(np.float32), expected.astype(np.float32), rtol=2e-3, atol=2e-3
        )


def test_resume_after_a_kill_shards_and_merge_give_the_same_bytes(
    tmp_path: Path, whole: tuple[Path, Path]
) -> None:
    photos, reference = whole
    args = ("capture", *MODEL, *OPS, photos, "--batch-size", "2", "--workers", "0")
    out = tmp_path / "resumed"
    killed = hd(tmp_path, *args, "-o", out, env={**os.environ, "HOOKDUMP_TEST_KILL_AT": "checkpoint-1"})
    assert killed.returncode == -9, killed.stderr
    done = hd(tmp_path, *args, "-o", out, "--resume")
    assert done.returncode == 0 and "resumed after 2 of 6" in done.stderr, done.stderr
    shards = [tmp_path / f"shard{i}" for i in range(2)]
    for i, shard in enumerate(shards):
        assert hd(tmp_path, *args, "--shard", f"{i}/2", "-o", shard).returncode == 0
    assert hd(tmp_path, "merge", *shards, "-o", tmp_path / "merged").returncode == 0
    for folder in (out, tmp_path / "merged"):
        for stem in FILES:
            assert (folder / f"{stem}.npy").read_bytes() == (reference / f"{stem}.npy").read_bytes(), (
                folder,
                stem,
            )
        manifest = json.loads((folder / "manifest.json").read_text())
        assert [e["layer"] for e in manifest["tensors"]] == NAMES


def test_torchrun_two_ranks_equal_one_process(
    tmp_path: Path, short_tmp: Path, whole: tuple[Path, Path]
) -> None:
    photos, reference = whole
    args = ["capture", *MODEL, *OPS, photos, "--batch-size", "2", "--workers", "0", "-o", tmp_path / "ranks"]
    command, env = torchrun(args, short_tmp)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for stem in FILES:
        assert (tmp_path / "ranks" / f"{stem}.npy").read_bytes() == (reference / f"{stem}.npy").read_bytes()


def test_every_reader_takes_op_values(tmp_path: Path, whole: tuple[Path, Path]) -> None:
    """show, stats, diff, compare, top and report name the op as the manifest does and write file-safe
    names; stats' JSON is numpy's own figures."""
    _, reference = whole
    cap = tmp_path / "cap"
    shutil.copytree(reference, cap)
    done = hd(tmp_path, "show", cap)
    assert done.returncode == 0, done.stderr
    assert "blocks.0:add (output)" in done.stdout and (cap / "blocks.0+add.png").is_file()
    done = hd(tmp_path, "stats", cap, "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    value = np.array(hookdump.open(cap)["blocks.0:add_1"])
    assert rows["blocks.0:add_1"]["max"] == pytest.approx(float(value.max()))
    assert rows["blocks.0:add_1"]["mean"] == pytest.approx(float(value.mean()), rel=1e-5)
    done = hd(tmp_path, "diff", reference, cap, "--json")
    assert done.returncode == 0, done.stderr
    assert {r["name"] for r in json.loads(done.stdout)["tensors"]} >= set(NAMES)
    done = hd(tmp_path, "compare", reference, cap, "--json")
    assert done.returncode == 0, done.stderr
    assert "blocks.0:add" in done.stdout
    done = hd(tmp_path, "top", cap, "-l", "blocks.0:add_1", "--sheets", tmp_path / "sheets")
    assert done.returncode == 0, done.stderr
    assert "blocks.0:add_1" in done.stdout
    assert not [p for p in (tmp_path / "sheets").rglob("*") if ":" in p.name]
    done = hd(tmp_path, "report", cap)
    assert done.returncode == 0, done.stderr
    page = (cap / "index.html").read_text()
    assert "blocks.0:add_1" in page
    assert not [p for p in cap.rglob("*") if ":" in p.name]


def test_grad_of_an_op_value_is_autograd_of_the_score(tmp_path: Path, chelsea: Path) -> None:
    """``--grad`` of ``blocks.3:add`` (the residual stream in the middle of the block) against the gradient
    autograd gives that tensor, taken by hand as block 3's norm2 input (which is that very tensor)."""
    model, checkpoint = seeded("vit_tiny_patch16_224", tmp_path, seed=9)
    out = tmp_path / "g"
    done = hd(tmp_path, "capture", "-m", "vit_tiny_patch16_224", "--checkpoint", checkpoint,
              "-l", "blocks.3:add", "--grad", chelsea, "-o", out)  # fmt: skip
    assert done.returncode == 0, done.stderr
    kept: dict[str, torch.Tensor] = {}

    def keep(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        kept["x"] = args[0]
        args[0].retain_grad()

    handle = model.blocks[3].norm2.register_forward_pre_hook(keep)
    try:
        scores = model(photo_batch(model, chelsea))
    finally:
        handle.remove()
    scores[0, scores[0].argmax()].backward()
    got = hookdump.open(out)
    assert np.array_equal(np.array(got["blocks.3:add"]), kept["x"].detach().numpy())
    np.testing.assert_allclose(
        np.array(got["blocks.3:add.grad"]), kept["x"].grad.numpy(), rtol=1e-5, atol=1e-8
    )


def test_errors_name_the_ops_there_are(tmp_path: Path, chelsea: Path) -> None:
    cases = [
        (("-l", "blocks.3:ad"), 3, ["`blocks.3` runs no op `ad` in its own forward; it runs 2: add, add_1",
                                    "Did you mean: blocks.3:add?", "list-modules vit_tiny_patch16_224"]),
        (("-l", "blocks.3.mlp:add"), 3, ["`blocks.3.mlp` runs no op of its own"]),
        (("-l", "blocks.3.nope:add"), 3, ["`blocks.3.nope` is not a module of vit_tiny_patch16_224"]),
        (("-l", "blocks.*:sub"), 3, ["Op pattern `blocks.*:sub` matches no op value"]),
        (("-l", "blocks.3:add", "--compile"), 2, ["--compile cannot capture op values (blocks.3:add)"]),
        (("-l", "blocks.3:add", "--what", "input"), 2, ["--what input saves what a module is called with"]),
        (("-l", "blocks.3:add@1"), 3, ["asks for call 1, but blocks.3:add runs 1 time(s)"]),
    ]  # fmt: skip
    for args, code, words in cases:
        done = hd(tmp_path, "capture", "-m", "vit_tiny_patch16_224", *args, chelsea, "-o", tmp_path / "x")
        assert done.returncode == code, (args, done.stderr)
        paragraph(done.stderr, *words)
        assert not (tmp_path / "x").exists()
    done = hd(
        tmp_path, "capture", "-m", "twins_svt_small", "-l", "pos_block:add", chelsea, "-o", tmp_path / "x"
    )
    assert done.returncode == 3
    paragraph(done.stderr, "`pos_block` is a ModuleList: containers are never called", "pos_block.0")


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_a_scripted_module_is_refused_and_its_neighbours_ops_still_named(
    tmp_path: Path, chelsea: Path
) -> None:
    """TorchScript runs a scripted module's forward where no torch function is seen: asking for its ops is
    refused saying so; the ops of the root around it are named and captured as usual."""
    from hookdump import api
    from hookdump.errors import LayerError

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.jit.script(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()))
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(x).mean((2, 3)) * 2)

    net = Net().eval()
    transform = timm.data.create_transform(input_size=(3, 32, 32))
    with pytest.raises(LayerError, match="is a TorchScript module"):
        api.capture([str(chelsea)], ["body:relu"], model=net, transform=transform, out=tmp_path / "a")
    with pytest.raises(LayerError, match="torch takes no hook on one"):  # its output neither: no hook at all
        api.capture([str(chelsea)], ["body"], model=net, transform=transform, out=tmp_path / "a")
    assert not (tmp_path / "a").exists()
    done = api.capture([str(chelsea)], [":mean", ":mul"], model=net, transform=transform, out=tmp_path / "b")
    got = hookdump.open(done.out)
    assert got[":mul"].shape == (1, 4)
    np.testing.assert_array_equal(np.array(got[":mul"]), np.array(got[":mean"]) * 2)


def test_an_op_value_in_channels_last_is_pooled_on_its_own_axes(tmp_path: Path, chelsea: Path) -> None:
    """ConvNeXt's LayerNorm2d permutes its (N, C, H, W) input to (N, H, W, C) for ``layer_norm``: that value
    is recorded NHWC and --reduce mean pools H and W (numpy's mean of the full capture), where the block's
    own ``mul`` stays NCHW."""
    layers = ("-l", "stages.0.blocks.0.norm:layer_norm", "-l", "stages.0.blocks.0:mul")
    for how in ("none", "mean"):
        args = ("capture", "-m", "convnext_atto", *layers, chelsea, "--reduce", how, "-o", tmp_path / how)
        assert hd(tmp_path, *args).returncode == 0
    full, pooled = hookdump.open(tmp_path / "none"), hookdump.open(tmp_path / "mean")
    layouts = {e["layer"]: e["layout"] for e in full.manifest["tensors"]}
    assert layouts == {"stages.0.blocks.0.norm:layer_norm": "NHWC", "stages.0.blocks.0:mul": "NCHW"}
    norm = np.array(full["stages.0.blocks.0.norm:layer_norm"], dtype=np.float64)
    assert norm.shape == (1, 56, 56, 40)
    np.testing.assert_allclose(pooled["stages.0.blocks.0.norm:layer_norm"], norm.mean(axis=(1, 2)), atol=1e-5)
    mul = np.array(full["stages.0.blocks.0:mul"], dtype=np.float64)
    np.testing.assert_allclose(pooled["stages.0.blocks.0:mul"], mul.mean(axis=(2, 3)), atol=1e-6)


def test_a_forward_that_runs_other_ops_after_the_first_pass_is_refused(tmp_path: Path, chelsea: Path) -> None:
    """A forward that adds one more ``add`` from its second call on: ``:add`` is ``x + 2`` in the first
    pass and would be ``x + 1`` in the next, so the capture stops with the counts, writing nothing."""
    from hookdump import api
    from hookdump.errors import LayerError

    class Drifting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 2, 3)
            self.passes = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv(x)
            if self.passes:
                x = x + 1
            self.passes += 1
            return x + 2

    transform = timm.data.create_transform(input_size=(3, 32, 32))
    options = {"model": Drifting().eval(), "transform": transform, "batch_size": 1, "workers": 0}
    with pytest.raises(LayerError, match=r"ran 2 `add` op\(s\), where the traced pass ran 1"):
        api.capture([str(chelsea), str(SKIMAGE_DATA / "coffee.png")], [":add"], out=tmp_path / "a", **options)
    assert not (tmp_path / "a").exists()


def test_an_op_without_the_batch_first_is_refused(tmp_path: Path, chelsea: Path) -> None:
    """The batch axis of each op is found by a second meta pass at batch 2: ViT's qkv ``permute`` (3, N, ...),
    OpenCLIP's (L, N, C) transpose and LeViT's cached bias table (no second run) are refused before any work,
    saying which; the ``unbind`` after the permute (batch first again) is captured."""
    cases = [
        (
            "vit_tiny_patch16_224",
            "blocks.0.attn:permute",
            "(3, 1, 3, 197, 64) for one input has its batch on axis 1",
        ),
        ("open_clip:ViT-S-32", "visual.transformer.resblocks.0.attn:transpose", "has its batch on axis 1"),
        ("levit_128s", "stages.0.blocks.0.attn:getitem", "ran in the traced pass only"),
    ]
    for model, layer, words in cases:
        done = hd(tmp_path, "capture", "-m", model, "-l", layer, chelsea, "--dry-run")
        assert done.returncode == 3, done.stderr
        paragraph(
            done.stderr, f"`{layer}`", words, "saves tensors batch first", f"list-modules {model} --ops"
        )
    done = hd(
        tmp_path,
        "capture",
        "-m",
        "vit_tiny_patch16_224",
        "-l",
        "blocks.0.attn:unbind",
        chelsea,
        "-o",
        tmp_path / "u",
    )
    assert done.returncode == 0, done.stderr
    assert [hookdump.open(tmp_path / "u")[n].shape for n in hookdump.open(tmp_path / "u")] == [
        (1, 3, 197, 64)
    ] * 3
