"""What a new user sees when something is wrong: one `error:` paragraph naming the thing and the fix, the
exit code of its kind, no traceback, no "failed unexpectedly", and nothing half-written left behind."""

from __future__ import annotations

import argparse
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
from cli_errors import EXE, TINY, TWINS_FOR_OLD_TIMM, RunsCode, png_of_zeros
from common import paragraph
from helpers import hand_hooks, photo_batch
from safetensors.torch import save_file
from typer.testing import CliRunner

from hookdump.cli.app import app


def refused(result: object, code: int, *words: str) -> str:
    """The run failed with ``code`` and one `error:` paragraph holding ``words``; returns the paragraph."""
    err: str = result.stderr  # type: ignore[attr-defined]
    assert result.exit_code == code, err  # type: ignore[attr-defined]
    return paragraph(err, *words)


def capture(cli, *args: object) -> object:
    return cli("capture", *TINY, *args)


# --- Typer's own usage errors, and --help ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("capture", "--random-input", "--batch-size", "ten"), ("--batch-size `ten` is not an integer.",)),
        (("capture", "--random-input", "--batch-size", "1.5"), ("--batch-size `1.5` is not an integer.",)),
        (("show", "--alpha", "2", "x.npy"), ("--alpha 2 is out of range: use a value from 0.0 to 1.0.",)),
        (("list-modules", "test_resnet", "--depth", "0"), ("--depth 0 is out of range: use 1 or more.",)),
        (("capture", "--random-input", "--nope"), ("No such option: --nope",)),
        (("capture", "--random-input", "--batch-size"), ("--batch-size", "requires an argument")),
        (("list-modules", "a", "b"), ("unexpected extra argument",)),
    ],
)
def test_typer_usage_errors_look_like_hookdump_errors(
    cli, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    text = refused(cli(*args), 2, *words)
    assert f"See `hookdump {args[0]} --help`." in text


def test_typer_usage_error_under_json_is_an_error_object(cli) -> None:
    result = cli("capture", "--random-input", "--json", "--batch-size", "ten")
    refused(result, 2, "--batch-size `ten` is not an integer.")
    error = json.loads(result.stdout)
    assert error["kind"] == "usage" and error["exit_code"] == 2 and "--help" in error["hint"]


def test_usage_error_through_the_console_script(tmp_path: Path) -> None:
    """Off a terminal, as CI runs it: two lines on stderr, nothing on stdout."""
    proc = forkrun.run(["list-modules", "test_resnet", "--depth", "0"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: --depth 0 is out of range: use 1 or more.",
        "See `hookdump list-modules --help`.",
    ]


@pytest.mark.parametrize("command", ["capture", "list-modules", "show", "merge", "stats", "report"])
def test_help_shows_plain_metavars(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    usage = next(line for line in result.stdout.splitlines() if "Usage:" in line)
    assert "{" not in usage and "[[" not in usage, usage
    assert "<list[" not in result.stdout


def test_help_usage_lines() -> None:
    def usage(command: str) -> str:
        out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
        return next(line for line in out.splitlines() if "Usage:" in line).strip()

    assert usage("capture") == "Usage: hookdump capture [OPTIONS] [IMAGES]..."
    assert usage("show") == "Usage: hookdump show [OPTIONS] FILE..."
    assert usage("list-modules") == "Usage: hookdump list-modules [OPTIONS] [MODEL]"


# --- numbers at 0, negative and absurd; malformed values -------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--seed", "-1"), ("--seed -1 is out of range", "2**64 - 1")),
        (("--seed", str(2**64)), (f"--seed {2**64} is out of range",)),
        (("--batch-size", "0"), ("--batch-size 0 is not positive",)),
        (("--batch-size", "-3"), ("--batch-size -3 is not positive",)),
        (("--workers", "-1"), ("--workers -1 is negative",)),
        (("--workers", "100000"), ("--workers 100000", "Use at most")),
        (("--target", "-1", "--grad"), ("--target -1 is negative",)),
        (("--shard-size", "0", "--format", "safetensors"), ("--shard-size `0` is not a size",)),
        (("--input-size", "3,224"), ("--input-size `3,224` is not C,H,W", "3,224,224")),
        (("--input-size", "0,32,32"), ("--input-size `0,32,32` is not C,H,W",)),
        (("--input-size", "3,1000000,1000000"), ("one image of that size takes", "of memory")),
        (("--shard", "3/2"), ("--shard `3/2` is not I/N", "--shard 0/4")),
        (("--dtype", "fp16"), ("--dtype `fp16` is not one of", "Did you mean --dtype float16?")),
        (("--model-arg", "num_classes"), ("--model-arg `num_classes` is not KEY=VALUE", "num_classes=10")),
        (("--model-arg", "pretrained=True"), ("--model-arg pretrained is set by hookdump", "--pretrained")),
    ],
)
def test_bad_option_values_are_usage_errors(cli, tmp_path: Path, args: tuple[str, ...], words) -> None:
    out = tmp_path / "o"
    shard = ("--sample",) if "--shard" in args else ("--random-input",)
    refused(capture(cli, *shard, "-o", out, *args), 2, *words)
    assert not out.exists()


def test_out_naming_a_file(cli, tmp_path: Path) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    refused(capture(cli, "--random-input", "-o", out), 2, f"--out `{out}` is a file", "another --out")
    assert out.read_text() == "mine\n"


def test_out_under_proc(cli) -> None:
    if not Path("/proc/self").is_dir() or os.statvfs("/proc").f_blocks != 0:
        pytest.skip("no /proc virtual file system here")
    refused(
        capture(cli, "--random-input", "-o", "/proc/hookdump-out"), 2, "`/proc` is on a virtual file system"
    )


def test_cuda_asked_for_and_absent_or_out_of_range(cli, tmp_path: Path) -> None:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count > 7:
        pytest.skip("this machine has a cuda:7")
    result = capture(cli, "--random-input", "-o", tmp_path / "o", "--device", "cuda:7")
    words = (
        (f"this machine has {count} CUDA device(s)",) if count else ("CUDA is not available", "--device cpu")
    )
    refused(result, 2, "--device cuda:7", *words)
    if not count:
        refused(capture(cli, "--random-input", "--device", "cuda"), 2, "CUDA is not available")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("text", "code", "words"),
    [
        ("batch_size = \n", 4, ("line 1, column 14: invalid TOML",)),
        ("batchsize = 3\n", 4, ("unknown key `batchsize`", "Did you mean: batch_size?")),
        ('batch_size = "ten"\n', 4, ("`batch_size` must be an integer", "batch_size = 1")),
        ("[capture]\nseed = -3\n", 4, ("bad.toml, line 2 (`seed`): --seed -3 is out of range",)),
    ],
)
def test_invalid_config_files(cli, tmp_path: Path, text: str, code: int, words: tuple[str, ...]) -> None:
    (tmp_path / "bad.toml").write_text(text)
    refused(
        capture(cli, "--random-input", "--config", tmp_path / "bad.toml", "-o", tmp_path / "o"), code, *words
    )
    assert not (tmp_path / "o").exists()


# --- images ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", [10_000, 14_000])  # between Pillow's two limits, and over both
def test_decompression_bomb_names_the_file(cli, tmp_path: Path, side: int) -> None:
    bomb = png_of_zeros(tmp_path / "huge.png", side)
    out = tmp_path / "o"
    text = refused(
        capture(cli, bomb, "-o", out), 4, f"`{bomb}` has {side * side:,} pixels", "decompression", "downscale"
    )
    assert "Warning" not in text
    assert not out.exists()


def test_image_without_read_permission(chelsea: Path, tmp_path: Path) -> None:
    """Through the console script; as root (who may read anything) without the capabilities that allow it."""
    locked = tmp_path / "locked.png"
    shutil.copy(chelsea, locked)
    locked.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root, and no setpriv to drop the right to read any file")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    proc = subprocess.run(
        [*prefix, EXE, "capture", locked, *TINY, "-o", tmp_path / "o"], capture_output=True, text=True
    )
    assert proc.returncode == 4, proc.stderr
    paragraph(proc.stderr, f"`{locked}` cannot be read: permission denied", "chmod")
    assert not (tmp_path / "o").exists()


def test_folder_in_a_list_file(cli, tmp_path: Path, photos: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(f"{photos}\n")
    refused(capture(cli, f"@{listing}", "-o", tmp_path / "o"), 4, f"`{photos}` is a folder", "@list")


def test_model_name_given_as_an_input(cli, tmp_path: Path) -> None:
    result = cli("capture", "resnet18", "-l", "layer1")
    refused(result, 4, "Input `resnet18` does not exist", "-m resnet18")


# --- checkpoints -----------------------------------------------------------------------------------------


def test_class_count_mismatch_names_the_model_arg(cli, tmp_path: Path) -> None:
    torch.manual_seed(0)
    path = tmp_path / "ten.pth"
    torch.save(timm.create_model("resnet18", num_classes=10).state_dict(), path)
    base = ("capture", "-m", "resnet18", "--random-input", "--input-size", "3,32,32", "-l", "fc")
    refused(
        cli(*base, "--checkpoint", path, "-o", tmp_path / "no"), 4, "fc.weight", "--model-arg num_classes=10"
    )
    assert not (tmp_path / "no").exists()
    out = tmp_path / "o"
    result = cli(*base, "--checkpoint", path, "--model-arg", "num_classes=10", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert np.load(out / "fc.npy").shape == (1, 10)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["options"]["model_arg"] == ["num_classes=10"]
    assert manifest["model"]["args"] == {"num_classes": 10}
    again = cli("capture", "--config", out / "manifest.json", "-o", tmp_path / "again")  # the record reruns
    assert again.exit_code == 0, again.stderr
    listed = cli("list-modules", "test_resnet", "--model-arg", "num_classes=7", "--filter", "fc", "--json")
    assert json.loads(listed.stdout)[0]["output_shapes"] == [[1, 7]]


def test_input_channel_mismatch_names_the_model_arg(cli, tmp_path: Path) -> None:
    path = tmp_path / "grey.safetensors"
    save_file(timm.create_model("test_resnet", in_chans=1).state_dict(), str(path))
    base = ("capture", "-m", "test_resnet", "--sample", "-l", "conv1", "--checkpoint", path)
    refused(cli(*base, "-o", tmp_path / "no"), 4, "conv1.0.weight", "--model-arg in_chans=1")
    out = tmp_path / "o"
    result = cli(*base, "--model-arg", "in_chans=1", "-o", out)  # the photo is read as grey, 1 channel
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["transform"]["input_size"] == [1, 160, 160] and len(manifest["transform"]["mean"]) == 1


def test_checkpoint_with_training_metadata_loads(cli, tmp_path: Path, chelsea: Path) -> None:
    torch.manual_seed(7)
    model = timm.create_model("test_resnet").eval()
    path = tmp_path / "trained.pth"
    metadata = {"args": argparse.Namespace(lr=0.1, model="test_resnet", out=Path("/runs/a"))}
    scalars = {"epoch": 3, "best_acc1": np.float64(0.71), "step": np.int64(5), "lrs": np.array([0.1, 0.01])}
    torch.save({"state_dict": model.state_dict(), **metadata, **scalars}, path)
    out = tmp_path / "o"
    result = cli("capture", "-m", "test_resnet", "-l", "layer1", chelsea, "--checkpoint", path, "-o", out)
    assert result.exit_code == 0, result.stderr
    # the weights were really used: the capture equals the model that was saved, hooked by hand
    expected = hand_hooks(model, ["layer1"], photo_batch(model, chelsea))[0]["layer1"]
    np.testing.assert_allclose(np.load(out / "layer1.npy"), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_pickle_that_would_run_code_is_refused(cli, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    path = tmp_path / "evil.pth"
    torch.save({"state_dict": timm.create_model("test_resnet").state_dict(), "x": RunsCode(marker)}, path)
    text = refused(capture(cli, "--random-input", "--checkpoint", path, "-o", tmp_path / "o"), 4, f"`{path}`")
    assert "GLOBAL" in text and "system" in text and "weights_only" in text
    assert not marker.exists() and not (tmp_path / "o").exists()


def test_whole_pickled_model_is_refused(cli, tmp_path: Path) -> None:
    path = tmp_path / "whole.pth"
    torch.save(timm.create_model("test_resnet"), path)
    refused(
        capture(cli, "--random-input", "--checkpoint", path, "-o", tmp_path / "o"), 4,
        "whole pickled model (`timm.models.resnet.ResNet`)", "torch.save(model.state_dict(), path)",
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["junk", "folder"])
def test_checkpoint_that_is_junk_or_a_folder(cli, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "weights.safetensors"
    if kind == "folder":
        path = tmp_path / "run"
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"")
        words: tuple[str, ...] = ("is a folder", "model.safetensors")
    else:
        path.write_bytes(b"not a safetensors file at all" * 4)
        words = ("not a valid safetensors file", "safetensors.torch.save_file")
    text = refused(capture(cli, "--random-input", "--checkpoint", path, "-o", tmp_path / "o"), 4, *words)
    assert "torch.load" not in text and "does not exist" not in text


# --- plugins and builders --------------------------------------------------------------------------------


def test_plugin_that_registers_nothing(cli, tmp_path: Path) -> None:
    plugin = tmp_path / "empty_plugin.py"
    plugin.write_text("SIZE = 3\n")
    result = cli("capture", "--import", plugin, "-m", "my_net", "--random-input", "-o", tmp_path / "o")
    text = refused(result, 4, "registered no model", "@register_model")
    assert "Did you mean" not in text


SLASH_PLUGIN = """
from timm.models import register_model
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("stem/conv", nn.Conv2d(3, 4, 3))

    def forward(self, x):
        return getattr(self, "stem/conv")(x)

@register_model
def hookdump_test_slash_net(pretrained=False, **kwargs):
    return Net()
"""


def test_module_name_with_a_slash(cli, tmp_path: Path) -> None:
    plugin = tmp_path / "slash_plugin.py"
    plugin.write_text(SLASH_PLUGIN)
    base = ("capture", "--import", plugin, "-m", "hookdump_test_slash_net", "--random-input")
    args = (*base, "--input-size", "3,16,16", "-l", "stem/conv")
    refused(cli(*args, "-o", tmp_path / "o"), 4, "Layer `stem/conv` has a `/`", "--format safetensors")
    assert not (tmp_path / "o").exists()
    kept = cli(*args, "--format", "safetensors", "-o", tmp_path / "st")
    assert kept.exit_code == 0, kept.stderr


def test_twins_plugin_for_old_timm_says_the_alias_needs_no_plugin(tmp_path: Path) -> None:
    """In a subprocess: the plugin registers `alt_gvt_small` over hookdump's alias for that process only."""
    (tmp_path / "gvt.py").write_text(TWINS_FOR_OLD_TIMM)
    args = ["capture", "--import", "gvt.py", "-m", "alt_gvt_small", "--random-input", "-l", "head"]
    proc = forkrun.run(args, cwd=tmp_path)  # a process of its own
    assert proc.returncode == 4, proc.stderr
    paragraph(
        proc.stderr, "ALTGVT.__init__() got an unexpected keyword argument 'pretrained_cfg'",
        "built-in alias `alt_gvt_small`", "twins_svt_small", "without --import", "**kwargs",
    )  # fmt: skip
    assert "FutureWarning" not in proc.stderr
    assert not (tmp_path / "hookdump-out").exists()


def test_builder_that_raises_gets_no_kwargs_hint(cli, tmp_path: Path) -> None:
    plugin = tmp_path / "raising_plugin.py"
    plugin.write_text(
        "from timm.models import register_model\n\n"
        "@register_model\ndef hookdump_test_raising_net(pretrained=False, **kwargs):\n"
        "    raise ValueError('depth must be even')\n"
    )
    result = cli("list-modules", "hookdump_test_raising_net", "--import", plugin)
    text = refused(result, 4, "ValueError: depth must be even", "error in plugin `raising_plugin`")
    assert "**kwargs" not in text


def test_model_arg_the_model_does_not_take(cli, tmp_path: Path) -> None:
    refused(
        capture(cli, "--random-input", "--model-arg", "depth_multiplier=2", "-o", tmp_path / "o"), 4,
        "--model-arg depth_multiplier is not an argument of test_resnet", "Drop --model-arg depth_multiplier",
    )  # fmt: skip
    assert not (tmp_path / "o").exists()


# --- a full disk -----------------------------------------------------------------------------------------


def test_disk_full_leaves_nothing_behind(cli, tiny_disk: Path) -> None:
    """The size check passes (about 15 KB of data), but 16 small files and their headers need more pages than
    the disk has: the writes themselves hit ENOSPC."""
    out = tiny_disk / "acts"
    result = cli(
        "capture", "-m", "resnet18", "--random-input", "--input-size", "3,64,64", "-l", "layer*.*.conv*",
        "--reduce", "mean", "-o", out,
    )  # fmt: skip
    refused(result, 4, "The disk is full", f"`{out}`", "Nothing of it was kept", "Free some space")
    assert list(tiny_disk.iterdir()) == []
