"""Issue 35 item 8: ``capture --dry-run`` is the run's own preflight (``api.plan``, which ``api.capture``
runs before its first batch), so the two cannot disagree: every documented error, run both ways through the
real console script, ends with the same exit code and the same error paragraph, and writes nothing."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import forkrun
import pytest
import timm
import torch
import transformers
from conftest import SKIMAGE_DATA
from safetensors.torch import save_file

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


def _hub_unreachable(tmp: Path) -> dict[str, str]:
    """timm's hub a closed port on loopback (refused at once), its cache empty: --pretrained cannot be had."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE" and "proxy" not in k.lower()}
    return {**env, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp / "hub")}


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
     _hub_unreachable),
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
        "layer1.grad.npy",
        "layer1.npy",
        "manifest.json",
    ]


def test_pretrained_weights_in_the_cache_pass_the_dry_run_and_the_run(tmp_path: Path) -> None:
    """The other side of the two cases above: the hub still unreachable, the weights in its cache (filled
    by hand, nothing downloaded): both go through."""
    torch.manual_seed(5)
    model = timm.create_model("test_resnet").eval()
    repo, commit = tmp_path / "hub" / "models--timm--test_resnet.r160_in1k", "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    save_file(model.state_dict(), str(repo / "snapshots" / commit / "model.safetensors"))
    args = ["capture", *TINY, "-l", "fc", "--pretrained", "--random-input", "-o", "out"]
    env = _hub_unreachable(tmp_path)
    dry = forkrun.run([*args, "--dry-run"], cwd=tmp_path, env=env)
    assert dry.returncode == 0 and "would hook 1 module(s)" in dry.stdout, dry.stderr
    assert not (tmp_path / "out").exists()
    run = forkrun.run(args, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert "note: weights: timm pretrained (from the local cache:" in run.stderr
