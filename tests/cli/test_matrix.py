"""The hardening matrix (issue 11): every way a run can go wrong, one row each, through the real command, all
held to one contract.

Each row is run twice, as users and CI run it: plain, then with ``--json``. Both must end with the row's
documented exit code and one `error:` paragraph on stderr (notes may come before it) that names the thing and
says the fix, with no traceback and no "failed unexpectedly"; plain stdout stays empty, and under ``--json``
stdout is one error object (``error``, ``kind``, ``exit_code``, ``hint``, ``schema_version``). Nothing on disk
may change: every row runs beside a copy of an earlier finished capture (most capture rows write into it with
``--overwrite``), and afterwards every file in the row's folder and in the shared inputs is byte for byte what
it was, with no new file (so no manifest and no tensor file of the failed run). The few rows that need the
console script itself (dropped privileges, a plugin that must not register in this process, Typer's errors off
a terminal) run it in a subprocess, once, with ``--json``: a process start costs seconds, and that one run
shows both the paragraph and the object.

Beside the table: images that are valid however odd (converted, the conversion recorded), HOOKDUMP_DEBUG, and
real Ctrl-C / SIGTERM during the decode, the forward, the write and the final conversion, each resumed to
files byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import timm
import torch
from cli_errors import TWINS_FOR_OLD_TIMM, RunsCode, png_of_zeros, run_unprivileged
from common import PLUGINS, SKIMAGE_DATA, WAIT_S, inputs_of, paragraph
from PIL import Image
from safetensors.torch import save_file
from typer.testing import CliRunner

from hookdump.cli.app import app
from hookdump.errors import HookdumpError

TINY = ("-m", "test_resnet", "--input-size", "3,32,32")
KINDS = {2: "usage", 3: "layer", 4: "input", 130: "interrupted", 143: "interrupted"}
FIX = re.compile(
    r"\b(Use|Pass|Give|Drop|Write|Add|Choose|Rerun|Fix|Check|Capture|Free|Make|Point|Hook|See|Wait|Save"
    r"|Decorate|Resume|Run|Ask|Pick|Finish|Keep|Load|Move)\b"
)
INTO = ("-o", "{c.out}", "--overwrite")  # into the copy of the earlier capture, replacing it only on success
NEW = ("-o", "{c.new}")
LONG = "stage" * 45  # a module name of 225 bytes


# --- plugins written for the matrix ------------------------------------------------------------------------

NAMES_PLUGIN = f'''
"""Module names that must not become file names as they are."""
from timm.models import register_model
from torch import nn


class Cased(nn.Module):
    def __init__(self):
        super().__init__()
        self.Conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.conv(self.Conv(x))


class Named(nn.Module):
    """One conv, registered under NAME."""

    NAME = ""

    def __init__(self):
        super().__init__()
        self.add_module(self.NAME, nn.Conv2d(3, 4, 1))

    def forward(self, x):
        return getattr(self, self.NAME)(x)


class Long(Named):
    NAME = {LONG!r}


class Absolute(Named):
    NAME = ESCAPE  # set below: an absolute path


@register_model
def matrix_case_net(pretrained=False, **kwargs):
    return Cased()


@register_model
def matrix_long_net(pretrained=False, **kwargs):
    return Long()


@register_model
def matrix_absolute_net(pretrained=False, **kwargs):
    return Absolute()
'''

OOM_PLUGIN = '''
"""Forwards that run out of memory: a real allocation the CPU allocator refuses, and CUDA's error."""
import torch
from timm.models import register_model
from torch import nn


class Hungry(nn.Module):
    def __init__(self, cuda):
        super().__init__()
        self.cuda_style = cuda
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        if x.device.type != "meta":
            if self.cuda_style:
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.19 GiB total capacity)"
                )
            torch.empty(x.shape[0] << 48, dtype=torch.uint8)  # 256 TB an image: the allocator says no
        return y


@register_model
def matrix_oom_net(pretrained=False, **kwargs):
    return Hungry(cuda=False)


@register_model
def matrix_cuda_oom_net(pretrained=False, **kwargs):
    return Hungry(cuda=True)
'''

STOP_PLUGIN = '''
"""A model whose second real forward is stopped as Ctrl-C stops it (KeyboardInterrupt in the main thread)."""
from timm.models import register_model
from torch import nn


class Stops(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.calls = 0

    def forward(self, x):
        if x.device.type != "meta":
            self.calls += 1
            if self.calls == 2:
                raise KeyboardInterrupt
        return self.conv(x)


@register_model
def matrix_stop_net(pretrained=False, **kwargs):
    return Stops()
'''

STALL_PLUGIN = '''
"""A small model; and, when HOOKDUMP_MATRIX_PHASE names a phase of a capture (decode, forward, write, commit),
a stall there: the run touches HOOKDUMP_MATRIX_MARK when it gets there, then takes its time, so that a signal
sent then arrives during that phase. Without the variable nothing is changed."""
import os
import time
from pathlib import Path

from timm.models import register_model
from torch import nn

PHASE = os.environ.get("HOOKDUMP_MATRIX_PHASE", "")
SECONDS = {"decode": 5.0, "forward": 60.0, "write": 5.0, "commit": 60.0}
AFTER = {"decode": 4, "forward": 2, "write": 1, "commit": 0}  # entries before the stall: 2 batches, 1, ...
_entered = {"n": 0}


def _stall(phase):
    if phase == PHASE:
        _entered["n"] += 1
        if _entered["n"] == AFTER[phase] + 1:
            Path(os.environ["HOOKDUMP_MATRIX_MARK"]).touch()
            time.sleep(SECONDS[phase])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if x.device.type != "meta":
            _stall("forward")
        return self.fc(self.pool(self.act(self.conv(x))).flatten(1))


@register_model
def matrix_stall_net(pretrained=False, **kwargs):
    return Net()


if PHASE:  # hookdump's own steps, slowed where they are looked up (decoding in the DataLoader worker too)
    import hookdump.inputs.loader
    import hookdump.store.folder.saved
    import hookdump.store.folder.streams

    def _slowed(owner, name, phase):
        original = getattr(owner, name)

        def slow(*args, **kwargs):
            _stall(phase)
            return original(*args, **kwargs)

        setattr(owner, name, slow)

    _slowed(hookdump.inputs.loader, "read", "decode")
    _slowed(hookdump.store.folder.streams.Streams, "append", "write")
    _slowed(hookdump.store.folder.saved, "write_pt", "commit")
'''


# --- what every row shares ---------------------------------------------------------------------------------


class Ctx:
    """Where a row runs: ``tmp`` its own folder, ``files`` the inputs made once for the module, ``out`` a copy
    of the earlier capture (which the row must leave as it was), ``new`` an --out that must not come to be."""

    def __init__(self, tmp: Path, files: Path) -> None:
        self.tmp, self.files = tmp, files
        self.out, self.new = tmp / "earlier", tmp / "new"
        self.escape = _escape(files)
        shutil.copytree(files / "earlier", self.out, symlinks=True)


@dataclass(frozen=True)
class Row:
    id: str
    argv: tuple[str, ...]
    code: int
    words: tuple[str, ...]
    setup: Callable[[Ctx, pytest.FixtureRequest], None] | None = None
    console: bool = False  # through the console script in a subprocess, once, with --json (or plain)
    plain: bool = False  # the console run without --json
    absent: tuple[str, ...] = ()  # paths that must not exist afterwards (a marker, an escape)


def _capture(*args: str) -> tuple[str, ...]:
    return ("capture", *TINY, *args)


def _plugin(name: str, model: str, *args: str) -> tuple[str, ...]:
    """A capture of ``model`` from plugin ``name`` (a file made for the matrix, or a path)."""
    where = name if name.startswith("/") else f"{{c.files}}/{name}"
    return ("capture", "--import", where, "-m", model, *args)


def _lock_held(c: Ctx, request: pytest.FixtureRequest) -> None:
    """Another capture writing into the folder: its kernel lock held on OUT/.hookdump.lock."""
    fd = os.open(c.out / ".hookdump.lock", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"pid 4242 on matrix-host, started 2025-01-01 00:00:00\n")
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    request.addfinalizer(lambda: os.close(fd))


def _interrupted_out(c: Ctx, request: pytest.FixtureRequest) -> None:
    shutil.rmtree(c.out)
    shutil.copytree(c.files / "interrupted", c.out)


def _escape_in_progress(c: Ctx, request: pytest.FixtureRequest) -> None:
    """A hand-edited progress.json whose stream file lies outside the folder: --resume must not touch it."""
    _interrupted_out(c, request)
    (c.tmp / "victim.npy").write_bytes(b"precious")
    progress = c.out / ".hookdump-partial" / "progress.json"
    data = json.loads(progress.read_text())
    data["streams"][0]["file"] = "../../victim.npy"
    progress.write_text(json.dumps(data))


def _escape_in_manifest(c: Ctx, request: pytest.FixtureRequest) -> None:
    """A manifest that lists a file outside the folder (which exists, and holds a tensor)."""
    np.save(c.tmp / "outside.npy", np.ones((1, 4, 2, 2), np.float32))
    manifest = c.out / "manifest.json"
    data = json.loads(manifest.read_text())
    data["tensors"][0]["file"] = "../outside.npy"
    manifest.write_text(json.dumps(data))


def _unreadable_image(c: Ctx, request: pytest.FixtureRequest) -> None:
    shutil.copy(SKIMAGE_DATA / "chelsea.png", c.tmp / "locked.png")
    (c.tmp / "locked.png").chmod(0)


def _unwritable_folder(c: Ctx, request: pytest.FixtureRequest) -> None:
    (c.tmp / "readonly").mkdir()
    (c.tmp / "readonly").chmod(0o555)


def _on_tiny_disk(c: Ctx, request: pytest.FixtureRequest) -> None:
    """--out on a real 64 KB file system (skipped where mounting is not allowed)."""
    disk = request.getfixturevalue("tiny_disk")
    assert disk == c.tmp / "disk"


def _needs_proc(c: Ctx, request: pytest.FixtureRequest) -> None:
    if not Path("/proc/self").is_dir() or os.statvfs("/proc").f_blocks != 0:
        pytest.skip("no /proc virtual file system here")


def _no_cuda(c: Ctx, request: pytest.FixtureRequest) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")


def _cuda_seven(c: Ctx, request: pytest.FixtureRequest) -> None:
    if torch.cuda.is_available() and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")


def _cuda_words() -> tuple[str, ...]:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return (
        (f"this machine has {count} CUDA device(s)",) if count else ("CUDA is not available", "--device cpu")
    )


ROWS = [
    # models and layers
    Row("model-unknown",
        (*_capture("-l", "layer1", "--random-input"), "-m", "resnet5O", *INTO),
        4, ("Unknown model `resnet5O`", "resnet50")),
    Row("layer-unknown",
        _capture("-l", "layerX", "--random-input", *INTO),
        3, ("`layerX` is not a module of test_resnet", "layer1", "list-modules")),
    Row("layer-container",
        ("capture", "-m", "test_vit_relpos", "-l", "blocks", "--random-input", "--dry-run", *INTO),
        3, ("`blocks` is a ModuleList", "blocks.0")),
    Row("layer-never-called-fused",
        ("capture", "-m", "test_vit", "-l", "blocks.0.attn.attn_drop", "--random-input", *INTO),
        3, ("never runs", "--attention")),
    Row("layer-never-called-unused",
        _plugin(f"{PLUGINS}/odd_plugin.py", "odd_net", "-l", "unused", "--input-size", "3,8,8",
                "--random-input", *INTO),
        3, ("`unused` (Linear) is never called", "list-modules odd_net")),
    Row("layer-glob-matches-nothing",
        _capture("-l", "layer9.*", "--random-input", *INTO),
        3, ("`layer9.*` matches no module", "--filter")),
    Row("layer-regex-matches-nothing",
        _capture("-l", "re:^nomatch$", "--random-input", *INTO),
        3, ("`re:^nomatch$` matches no module",)),
    Row("layer-regex-invalid",
        _capture("-l", "re:[unclosed", "--random-input", *INTO),
        2, ("Bad regular expression in `re:[unclosed`", "Fix the pattern")),
    Row("layer-did-not-fire-at-run-time",
        _plugin(f"{PLUGINS}/branchy_plugin.py", "branchy_net", "-l", "other", "--input-size", "3,16,16",
                "--random-input", *INTO),
        3, ("`other` did not fire during the forward pass of branchy_net",)),
    Row("layer-call-beyond",
        _capture("-l", "layer1.0.act1@3", "--random-input", *INTO),
        3, ("asks for call 3, but layer1.0.act1 runs 1 time(s)", "use layer1.0.act1")),
    Row("attention-without-attention",
        _capture("-l", "layer1", "--attention", "--random-input", *INTO),
        3, ("--attention: none of the layers", "has no attention module at all", "Drop --attention")),
    Row("feat-out-of-range",
        _capture("-l", "feat:9", "--random-input", *INTO),
        3, ("`feat:9`: test_resnet has 5 feature levels", "feat:-1")),
    Row("feat-without-feature-info",
        _plugin(f"{PLUGINS}/odd_plugin.py", "odd_net", "-l", "feat:0", "--input-size", "3,8,8",
                "--random-input", *INTO),
        3, ("odd_net has no feature levels",)),
    # images
    Row("image-missing",
        _capture("-l", "layer1", "{c.files}/missing.jpg", *INTO),
        4, ("`{c.files}/missing.jpg` does not exist",)),
    Row("image-folder-without-images",
        _capture("-l", "layer1", "{c.files}/noimages", *INTO),
        4, ("Folder `{c.files}/noimages` holds no images", ".jpg")),
    Row("image-zero-bytes",
        _capture("-l", "layer1", "{c.files}/zero.jpg", *INTO),
        4, ("`{c.files}/zero.jpg` is empty (0 bytes)", "--skip-bad")),
    Row("image-truncated-jpeg",
        _capture("-l", "layer1", "{c.files}/truncated.jpg", *INTO),
        4, ("`{c.files}/truncated.jpg` is not an image", "image file is truncated", "--skip-bad")),
    Row("image-text-named-jpg",
        _capture("-l", "layer1", "{c.files}/text.jpg", *INTO),
        4, ("`{c.files}/text.jpg` is not an image", "cannot identify image file")),
    Row("image-decompression-bomb",
        _capture("-l", "layer1", "{c.files}/bomb.png", *INTO),
        4, ("`{c.files}/bomb.png` has 196,000,000 pixels", "decompression bombs", "downscale")),
    Row("image-unreadable",
        _capture("-l", "layer1", "{c.tmp}/locked.png", *INTO),
        4, ("`{c.tmp}/locked.png` cannot be read: permission denied", "chmod"), _unreadable_image,
        console=True),
    Row("image-symlink-loop",
        _capture("-l", "layer1", "{c.files}/loop_a.jpg", *INTO),
        4, ("`{c.files}/loop_a.jpg` is a symbolic link that leads nowhere",)),
    Row("image-list-missing-entry",
        _capture("-l", "layer1", "@{c.files}/list.txt", *INTO),
        4, ("`{c.files}/missing_in_list.png` does not exist", "@list")),
    Row("image-list-file-missing",
        _capture("-l", "layer1", "@{c.files}/nolist.txt", *INTO),
        4, ("List file `{c.files}/nolist.txt` does not exist",)),
    Row("image-list-naming-a-folder",
        _capture("-l", "layer1", "@{c.files}/folderlist.txt", *INTO),
        4, ("`{c.files}/noimages` is a folder",)),
    Row("image-is-a-model-name",
        ("capture", "resnet18", "-l", "layer1", *INTO),
        4, ("Input `resnet18` does not exist", "-m resnet18")),
    Row("input-none",
        _capture("-l", "layer1", *INTO),
        2, ("No input given", "--sample")),
    # checkpoints
    Row("checkpoint-missing",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/nope.pth", *INTO),
        4, ("Checkpoint `{c.files}/nope.pth` does not exist",)),
    Row("checkpoint-corrupt",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/junk.pth", *INTO),
        4, ("`{c.files}/junk.pth` is not a file torch.load can read", "Unsupported operand", "complete")),
    Row("checkpoint-truncated-pth",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/truncated.pth", *INTO),
        4, ("`{c.files}/truncated.pth` is not a file torch.load can read", "zip archive")),
    Row("checkpoint-truncated-safetensors",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/truncated.safetensors", *INTO),
        4, ("`{c.files}/truncated.safetensors` is not a valid safetensors file", "save_file")),
    Row("checkpoint-wrong-architecture",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/vit.safetensors", *INTO),
        4, ("does not fit test_resnet", "missing (in the model, not in the file)", "unexpected", "--model")),
    Row("checkpoint-shape-mismatch",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/shape.safetensors", *INTO),
        4, ("fc.weight: file (3, 96) vs model (1000, 96)", "--model-arg num_classes=3")),
    Row("checkpoint-pickle-runs-code",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/evil.pth", *INTO),
        4, ("`{c.files}/evil.pth` holds `posix.system`", "weights_only"), absent=("{c.files}/MARKER",)),
    Row("checkpoint-whole-pickled-model",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/whole.pth", *INTO),
        4, ("whole pickled model (`timm.models.resnet.ResNet`)", "model.state_dict()")),
    Row("checkpoint-folder",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/noimages", *INTO),
        4, ("is a folder, not a file",)),
    Row("checkpoint-unknown-extension",
        _capture("-l", "layer1", "--random-input", "--checkpoint", "{c.files}/weights.h5", *INTO),
        4, ("unknown extension `.h5`", ".safetensors")),
    # plugins
    Row("plugin-missing-module",
        _capture("-l", "layer1", "--random-input", "--import", "no_such_module_xyz", *INTO),
        4, ("No module named 'no_such_module_xyz'", "--import")),
    Row("plugin-missing-file",
        _capture("-l", "layer1", "--random-input", "--import", "{c.files}/nope.py", *INTO),
        4, ("Plugin file `{c.files}/nope.py` does not exist",)),
    Row("plugin-raises",
        _capture("-l", "layer1", "--random-input", "--import", "{c.files}/raises_plugin.py", *INTO),
        4, ("Could not import plugin", "foo_dependency")),
    Row("plugin-registers-nothing",
        _plugin("empty_plugin.py", "my_net", "-l", "conv", "--random-input", *INTO),
        4, ("registered no model", "@register_model")),
    Row("plugin-builder-raises",
        _plugin("builder_plugin.py", "hookdump_matrix_raising", "-l", "conv", "--random-input", *INTO),
        4, ("ValueError: depth must be even", "error in plugin `builder_plugin`")),
    Row("plugin-builder-for-old-timm",
        _plugin(f"{PLUGINS}/old_style_plugin.py", "old_style_net", "-l", "0", "--random-input", *INTO),
        4, ("pretrained_cfg", "**kwargs")),
    Row("plugin-twins-gvt-for-timm-0.3",
        _plugin("gvt/gvt.py", "alt_gvt_large", "-l", "head", "--random-input", *INTO),
        4, ("unexpected keyword argument 'pretrained_cfg'", "built-in alias `alt_gvt_large`",
            "twins_svt_large", "without --import"), console=True),
    # output
    Row("out-not-writable",
        _capture("-l", "layer1", "--random-input", "-o", "{c.tmp}/readonly/acts"),
        2, ("--out `{c.tmp}/readonly/acts` cannot be created", "not a writable folder"), _unwritable_folder,
        console=True),
    Row("out-is-a-file",
        _capture("-l", "layer1", "--random-input", "-o", "{c.out}/manifest.json"),
        2, ("--out `{c.out}/manifest.json` is a file", "another --out")),
    Row("out-holds-a-capture",
        _capture("-l", "layer1", "--random-input", "-o", "{c.out}"),
        2, ("`{c.out}` already holds a capture", "--overwrite")),
    Row("out-holds-an-interrupted-capture",
        _plugin("stop_plugin.py", "matrix_stop_net", "-l", "conv", "{c.files}/photos", "--batch-size", "1",
                "-o", "{c.out}"),
        2, ("holds an interrupted capture (1 of 2 images done)", "--resume"), _interrupted_out),
    Row("out-resume-with-other-options",
        _plugin("stop_plugin.py", "matrix_stop_net", "-l", "conv", "{c.files}/photos", "--batch-size", "2",
                "-o", "{c.out}", "--resume"),
        2, ("batch_size: 1 then, 2 now", "--overwrite"), _interrupted_out),
    Row("out-resume-nothing",
        _capture("-l", "layer1", "--random-input", "-o", "{c.out}", "--resume"),
        2, ("Nothing to resume in `{c.out}`: its capture is finished",)),
    Row("out-overwrite-and-resume",
        _capture("-l", "layer1", "--random-input", *INTO, "--resume"),
        2, ("--overwrite starts again, --resume continues: not both",)),
    Row("out-locked-by-another-capture",
        _capture("-l", "layer1", "--random-input", *INTO),
        2, ("is being written by another hookdump capture (pid 4242 on matrix-host", "Wait for it"),
        _lock_held),
    Row("out-under-proc",
        _capture("-l", "layer1", "--random-input", "-o", "/proc/hookdump-matrix"),
        2, ("`/proc` is on a virtual file system",), _needs_proc),
    Row("out-disk-full-while-writing",
        ("capture", "-m", "resnet18", "--input-size", "3,64,64", "--random-input", "-l", "layer*.*.conv*",
         "--reduce", "mean", "-o", "{c.tmp}/disk/acts"),
        4, ("The disk is full", "`{c.tmp}/disk/acts`", "it needs about", "Nothing of it was kept"),
        _on_tiny_disk),
    Row("out-disk-too-small-for-the-capture",
        _capture("-l", "layer1", "{c.files}/photos", "--input-size", "3,160,160", "-o", "{c.tmp}/disk/acts"),
        4, ("This capture needs about", "KB free", "--reduce mean"), _on_tiny_disk),
    # names that must never lead out of the folder
    Row("name-layer-with-dot-dot",
        _capture("-l", "../../etc/passwd", "--random-input", *INTO),
        3, ("`../../etc/passwd` is not a module of test_resnet",)),
    Row("name-layer-absolute",
        _capture("-l", "/etc/passwd", "--random-input", *INTO),
        3, ("`/etc/passwd` is not a module of test_resnet",)),
    Row("name-layer-with-nul",
        _capture("-l", "layer1\0.npy", "--random-input", *INTO),
        3, ("is not a module of test_resnet",)),
    Row("name-module-absolute-path",
        _plugin("names_plugin.py", "matrix_absolute_net", "-l", "{c.escape}", "--input-size", "3,8,8",
                "--random-input", *INTO),
        4, ("Layer `{c.escape}` has a `/` in its name", "--format safetensors"),
        absent=("{c.escape}.npy",)),
    Row("name-module-too-long",
        _plugin("names_plugin.py", "matrix_long_net", "-l", LONG, "--input-size", "3,8,8", "--random-input",
                *INTO),
        4, ("has a name of 225 bytes, too long for a .npy file name", "--format safetensors")),
    Row("name-modules-equal-but-for-case",
        _plugin("names_plugin.py", "matrix_case_net", "-l", "Conv", "-l", "conv", "--input-size", "3,8,8",
                "--random-input", *INTO),
        4, ("Layers `Conv` and `conv` differ only in case", "case-insensitive", "--format safetensors")),
    Row("name-modules-equal-but-for-case-by-glob",
        _plugin("names_plugin.py", "matrix_case_net", "-l", "*", "--format", "pt", "--input-size", "3,8,8",
                "--random-input", *INTO),
        4, ("Layers `Conv` and `conv` differ only in case: their .pt files",)),
    Row("name-show-key-with-dot-dot",
        ("show", "{c.out}", "--key", "../../etc/passwd"),
        2, ("No tensor `../../etc/passwd` in `{c.out}`", "layer1")),
    Row("name-show-key-absolute",
        ("show", "{c.out}", "--key", "/etc/passwd"),
        2, ("No tensor `/etc/passwd`",)),
    Row("name-manifest-lists-a-file-outside",
        ("show", "{c.out}"),
        4, ("lists the file `../outside.npy`, which is not a file in `{c.out}`",), _escape_in_manifest),
    Row("name-manifest-lists-a-file-outside-stats",
        ("stats", "{c.out}"),
        4, ("lists the file `../outside.npy`",), _escape_in_manifest),
    Row("name-progress-lists-a-file-outside",
        _plugin("stop_plugin.py", "matrix_stop_net", "-l", "conv", "{c.files}/photos", "--batch-size", "1",
                "-o", "{c.out}", "--resume"),
        4, ("progress.json` lists the file `../../victim.npy`",), _escape_in_progress),
    # devices and memory
    Row("device-cuda-absent",
        _capture("-l", "layer1", "--random-input", "--device", "cuda", *INTO),
        2, ("CUDA is not available", "--device cpu"), _no_cuda),
    Row("device-cuda-7",
        _capture("-l", "layer1", "--random-input", "--device", "cuda:7", *INTO),
        2, ("--device cuda:7", *_cuda_words()), _cuda_seven),
    Row("device-unknown",
        _capture("-l", "layer1", "--random-input", "--device", "tpu", *INTO),
        2, ("Unknown device `tpu`", "cuda:N")),
    Row("out-of-memory-cpu-allocator",
        _plugin("oom_plugin.py", "matrix_oom_net", "-l", "conv", "--input-size", "3,8,8", "--random-input",
                *INTO),
        4, ("Out of memory: 281.5 TB more were asked for at once", "smaller --batch-size")),
    Row("out-of-memory-cuda",
        _plugin("oom_plugin.py", "matrix_cuda_oom_net", "-l", "conv", "--input-size", "3,8,8",
                "--random-input", *INTO),
        4, ("Out of memory: CUDA out of memory. Tried to allocate 20.00 GiB", "smaller --batch-size")),
    # options: numbers at 0, negative and absurd; malformed values
    *[
        Row(f"option-{name}", _capture("-l", "layer1", "--random-input", *args, *INTO), 2, words)
        for name, args, words in [
            ("batch-size-0", ("--batch-size", "0"), ("--batch-size 0 is not positive",)),
            ("batch-size-negative", ("--batch-size", "-3"), ("--batch-size -3 is not positive",)),
            ("batch-size-absurd", ("--batch-size", str(10**30)), ("more images than one forward pass",)),
            ("batch-size-not-a-number", ("--batch-size", "ten"), ("--batch-size `ten` is not an integer.",)),
            ("workers-negative", ("--workers", "-1"), ("--workers -1 is negative",)),
            ("workers-absurd", ("--workers", "100000"), ("--workers 100000", "Use at most")),
            ("seed-negative", ("--seed", "-1"), ("--seed -1 is out of range", "2**64 - 1")),
            ("seed-absurd", ("--seed", str(2**64)), (f"--seed {2**64} is out of range",)),
            ("target-negative", ("--target", "-1", "--grad"), ("--target -1 is negative",)),
            ("target-absurd", ("--target", str(10**30), "--grad"), ("not a class of test_resnet", "0 ...")),
            ("shard-size-0", ("--shard-size", "0", "--format", "safetensors"), ("`0` is not a size",)),
            ("shard-size-negative", ("--shard-size", "-1", "--format", "safetensors"), ("`-1` is not",)),
            ("shard-size-malformed", ("--shard-size", "1TBB", "--format", "safetensors"), ("`1TBB` is not",)),
            ("input-size-two-numbers", ("--input-size", "3,224"), ("`3,224` is not C,H,W", "3,224,224")),
            ("input-size-0", ("--input-size", "0,32,32"), ("`0,32,32` is not C,H,W",)),
            ("input-size-negative", ("--input-size", "-3,32,32"), ("`-3,32,32` is not C,H,W",)),
            ("input-size-words", ("--input-size", "abc"), ("`abc` is not C,H,W",)),
            ("input-size-absurd", ("--input-size", "3,1000000,1000000"), ("one image of that size takes",)),
            ("input-size-wrong-channels", ("--input-size", "5,32,32"), ("does not run on a 5x32x32 input",)),
            ("shard-3-of-2", ("--shard", "3/2"), ("--shard `3/2` is not I/N", "--shard 0/4")),
            ("shard-0-of-0", ("--shard", "0/0"), ("--shard `0/0` is not I/N",)),
            ("shard-words", ("--shard", "a"), ("--shard `a` is not I/N",)),
            ("dtype-unknown", ("--dtype", "fp16"), ("--dtype `fp16` is not one of", "--dtype float16")),
            ("what-unknown", ("--what", "outputs"), ("--what `outputs` is not one of", "--what output")),
            ("reduce-unknown", ("--reduce", "avg"), ("--reduce `avg` is not one of",)),
            ("save-dtype-unknown", ("--save-dtype", "int8"), ("--save-dtype `int8` is not one of",)),
            ("format-unknown", ("--format", "npz"), ("Unknown --format `npz`", "npy, pt, safetensors")),
            ("save-dtype-bfloat16-in-npy", ("--save-dtype", "bfloat16"), ("numpy has no bfloat16",)),
            ("unknown-option", ("--nope",), ("No such option: --nope",)),
        ]
    ],
    Row("option-shard-gets-no-batch",
        _capture("-l", "layer1", "{c.files}/photos", "--shard", "1/100000", *INTO),
        2, ("--shard 1/100000 gets no batch", "fewer shards")),
    Row("option-shard-of-random-input",
        _capture("-l", "layer1", "--random-input", "--shard", "0/2", *INTO),
        2, ("--shard splits image inputs",)),
    Row("option-missing-value",
        ("capture", *TINY, "--random-input", *INTO, "-l"),
        2, ("-l", "requires an argument")),
    Row("option-depth-0",
        ("list-modules", "test_resnet", "--depth", "0"),
        2, ("--depth 0 is out of range: use 1 or more.", "See `hookdump list-modules --help`.")),
    Row("option-typer-error-off-a-terminal",
        ("list-modules", "test_resnet", "--depth", "zero"),
        2, ("--depth `zero` is not an integer.", "See `hookdump list-modules --help`."), console=True,
        plain=True),
    Row("config-syntax",
        _capture("-l", "layer1", "--random-input", "--config", "{c.files}/syntax.toml", *INTO),
        4, ("line 1, column 14: invalid TOML",)),
    Row("config-unknown-key",
        _capture("-l", "layer1", "--random-input", "--config", "{c.files}/unknown.toml", *INTO),
        4, ("unknown key `batchsize`", "Did you mean: batch_size?")),
    Row("config-wrong-type",
        _capture("-l", "layer1", "--random-input", "--config", "{c.files}/type.toml", *INTO),
        4, ("`batch_size` must be an integer", "batch_size = 1")),
    Row("config-missing",
        _capture("-l", "layer1", "--random-input", "--config", "{c.files}/nope.toml", *INTO),
        4, ("{c.files}/nope.toml does not exist",)),
    Row("config-folder",
        _capture("-l", "layer1", "--random-input", "--config", "{c.files}/noimages", *INTO),
        4, ("is a folder, not a config file",)),
    Row("config-json-not-a-manifest",
        _capture("-l", "layer1", "--random-input", "--config", "{c.files}/other.json", *INTO),
        4, ("is not a hookdump manifest", "manifest.json")),
    # --model-arg
    *[
        Row(f"model-arg-{name}", _capture("-l", "layer1", "--random-input", *args, *INTO), code, words)
        for name, args, code, words in [
            ("not-key-value", ("--model-arg", "num_classes"), 2, ("`num_classes` is not KEY=VALUE",)),
            ("no-key", ("--model-arg", "=3"), 2, ("`=3` is not KEY=VALUE",)),
            ("twice", ("--model-arg", "num_classes=1", "--model-arg", "num_classes=2"), 2,
             ("--model-arg num_classes is given twice",)),
            ("set-by-hookdump", ("--model-arg", "pretrained=True"), 2, ("set by hookdump", "--pretrained")),
            ("not-an-argument", ("--model-arg", "depth_multiplier=2"), 4,
             ("--model-arg depth_multiplier is not an argument of test_resnet", "Drop --model-arg")),
            ("wrong-type", ("--model-arg", "num_classes='ten'"), 4, ("num_classes='ten'", "--model-arg")),
        ]
    ],
    # list-modules
    Row("list-modules-unknown-model",
        ("list-modules", "resnet5O"),
        4, ("Unknown model `resnet5O`", "resnet50")),
    Row("list-modules-unknown-filter-path",
        ("list-modules", "test_resnet", "--filter", "layer9"),
        3, ("`layer9` is not a module of test_resnet",)),
    Row("list-modules-two-models",
        ("list-modules", "test_resnet", "-m", "test_vit"),
        2, ("Two models given: `test_resnet` and --model `test_vit`",)),
    Row("list-modules-plugin-missing",
        ("list-modules", "x", "--import", "{c.files}/nope.py"),
        4, ("Plugin file `{c.files}/nope.py` does not exist",)),
    Row("list-modules-input-size",
        ("list-modules", "test_resnet", "--input-size", "3,0,0"),
        2, ("`3,0,0` is not C,H,W",)),
    Row("list-modules-model-arg",
        ("list-modules", "test_resnet", "--model-arg", "nope=1"),
        4, ("--model-arg nope is not an argument of test_resnet",)),
    Row("list-modules-extra-argument",
        ("list-modules", "a", "b"),
        2, ("unexpected extra argument",)),
    # show
    Row("show-missing-file",
        ("show", "{c.files}/missing.npy"),
        4, ("`{c.files}/missing.npy` does not exist",)),
    Row("show-not-a-tensor",
        ("show", "{c.files}/text.jpg"),
        4, ("is not a tensor file", ".npy")),
    Row("show-a-manifest",
        ("show", "{c.out}/manifest.json"),
        4, ("is not a tensor file",)),
    Row("show-empty-tensor",
        ("show", "{c.files}/empty.npy"),
        4, ("holds an empty tensor of shape (0, 3, 4, 4)",)),
    Row("show-index-out-of-range",
        ("show", "{c.out}/layer1.npy", "--index", "5"),
        2, ("--index 5 is out of range: the tensor holds 1 image(s)", "--index 0")),
    Row("show-index-negative",
        ("show", "{c.out}/layer1.npy", "--index", "-1"),
        2, ("--index -1 is out of range",)),
    Row("show-index-words",
        ("show", "{c.out}/layer1.npy", "--index", "x"),
        2, ("`x` is not an image number",)),
    Row("show-key-unknown",
        ("show", "{c.out}", "--key", "layer9"),
        2, ("No tensor `layer9`", "layer1")),
    Row("show-key-on-npy",
        ("show", "{c.out}/layer1.npy", "--key", "layer1"),
        2, ("--key is for .safetensors files", "Drop --key")),
    Row("show-channels-out-of-range",
        ("show", "{c.out}/layer1.npy", "--channels", "40:50"),
        2, ("--channels `40:50` is outside the 32 channels of layer1", "0 <= A < B <= 32")),
    Row("show-channels-reversed",
        ("show", "{c.out}/layer1.npy", "--channels", "5:2"),
        2, ("`5:2` is outside",)),
    Row("show-channels-with-top-k",
        ("show", "{c.out}/layer1.npy", "--channels", "0:4", "--top-k", "2"),
        2, ("--channels and --top-k both pick channels",)),
    Row("show-top-k-0",
        ("show", "{c.out}/layer1.npy", "--top-k", "0"),
        2, ("--top-k 0 is out of range",)),
    Row("show-max-channels-0",
        ("show", "{c.out}/layer1.npy", "--max-channels", "0"),
        2, ("--max-channels 0 is out of range",)),
    Row("show-alpha-absurd",
        ("show", "{c.out}/layer1.npy", "--alpha", "2"),
        2, ("--alpha 2 is out of range: use a value from 0.0 to 1.0.",)),
    Row("show-gradcam-without-grad",
        ("show", "{c.out}/layer1.npy", "--gradcam", "--overlay", f"{SKIMAGE_DATA}/chelsea.png"),
        4, ("`{c.out}/layer1.npy` has no gradient beside it", "Capture again with --grad")),
    Row("show-gradcam-without-overlay",
        ("show", "{c.out}/layer1.npy", "--gradcam"),
        2, ("Add --overlay",)),
    Row("show-rollout-without-attention",
        ("show", "{c.out}", "--rollout"),
        2, ("none were given", "--attention")),
    Row("show-windowed-swin-attention",
        ("show", "{c.files}/swin", "--key", "layers.0.blocks.0.attn.attn"),
        4, ("(windows, as in Swin)", "global-attention")),
    Row("show-pt-pickle-runs-code",
        ("show", "{c.files}/evil.pt"),
        4, ("`{c.files}/evil.pt` holds `posix.system`", "refuses to unpickle"),
        absent=("{c.files}/MARKER-show",)),
    Row("show-pt-pickled-module",
        ("show", "{c.files}/module.pt"),
        4, ("holds `torch.nn.modules.linear.Linear`",)),
    Row("show-pt-not-a-tensor",
        ("show", "{c.files}/dict.pt"),
        4, ("holds a dict, not a real tensor",)),
    Row("show-overlay-missing",
        ("show", "{c.out}/layer1.npy", "--overlay", "{c.files}/missing.jpg"),
        4, ("--overlay `{c.files}/missing.jpg` does not exist",)),
    Row("show-interrupted-capture",
        ("show", "{c.out}"),
        4, ("incomplete capture", "--resume"), _interrupted_out),
    # report, stats, merge
    Row("report-no-manifest",
        ("report", "{c.files}/noimages"),
        4, ("holds no manifest.json",)),
    Row("report-interrupted-capture",
        ("report", "{c.out}"),
        4, ("holds an interrupted capture (1 of 2 images done)", "--resume"), _interrupted_out),
    Row("report-max-channels-0",
        ("report", "{c.out}", "--max-channels", "0"),
        2, ("--max-channels 0",)),
    Row("stats-not-a-capture",
        ("stats", "{c.files}"),
        4, ("holds no manifest.json", "--out folder")),
    Row("stats-interrupted-capture",
        ("stats", "{c.out}"),
        4, ("incomplete capture",), _interrupted_out),
    Row("merge-missing-shard",
        ("merge", "{c.files}/shard0", *NEW),
        4, ("Shards missing: 1/2",)),
    Row("merge-repeated-shard",
        ("merge", "{c.files}/shard0", "{c.files}/shard0", "{c.files}/shard1", *NEW),
        4, ("Shard 0/2 is given twice", "Pass each shard once")),
    Row("merge-shards-of-different-runs",
        ("merge", "{c.files}/shard0", "{c.files}/other1", *NEW),
        4, ("These shards come from different runs", "--shard 0/N")),
    Row("merge-not-a-shard",
        ("merge", "{c.out}", *NEW),
        4, ("is not a shard of a capture",)),
    Row("merge-into-a-capture",
        ("merge", "{c.files}/shard0", "{c.files}/shard1", "-o", "{c.out}"),
        2, ("`{c.out}` already holds a capture", "--overwrite")),
    Row("merge-no-shards",
        ("merge", *NEW),
        2, ("Missing argument", "See `hookdump merge --help`.")),
]  # fmt: skip


# --- the inputs, made once ---------------------------------------------------------------------------------


def _escape(files: Path) -> str:
    """An absolute path as a module name (torch allows no `.` in it): where its .npy would go."""
    return str(files / "escape").replace(".", "_")


def _invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def _made(*args: object, code: int = 0) -> None:
    result = _invoke(*args)
    assert result.exit_code == code, result.stderr


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Everything the rows read: broken images, checkpoints, plugins, configs, tensors, earlier captures."""
    files = tmp_path_factory.mktemp("matrix-files")
    chelsea = SKIMAGE_DATA / "chelsea.png"
    # images
    (files / "noimages").mkdir()
    (files / "noimages" / "notes.txt").write_text("no image here\n")
    (files / "zero.jpg").write_bytes(b"")
    Image.open(chelsea).convert("RGB").save(files / "full.jpg", quality=90)
    whole = (files / "full.jpg").read_bytes()
    (files / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (files / "text.jpg").write_text("hello, I am not a JPEG\n")
    png_of_zeros(files / "bomb.png", 14_000)
    (files / "loop_a.jpg").symlink_to(files / "loop_b.jpg")
    (files / "loop_b.jpg").symlink_to(files / "loop_a.jpg")
    (files / "list.txt").write_text(f"# inputs\n\n{chelsea}\n   \nmissing_in_list.png\n")
    (files / "folderlist.txt").write_text(f"{files / 'noimages'}\n")
    (files / "photos").mkdir()
    for name in ("a.png", "b.png"):
        shutil.copy(chelsea, files / "photos" / name)
    # checkpoints
    torch.manual_seed(0)
    state = timm.create_model("test_resnet").state_dict()
    save_file(state, str(files / "good.safetensors"))
    good = (files / "good.safetensors").read_bytes()
    (files / "truncated.safetensors").write_bytes(good[: len(good) // 2])
    torch.save(state, files / "good.pth")
    pth = (files / "good.pth").read_bytes()
    (files / "truncated.pth").write_bytes(pth[: len(pth) // 2])
    (files / "junk.pth").write_bytes(b"garbage " * 20)
    (files / "weights.h5").write_bytes(b"\x89HDF\r\n")
    save_file(timm.create_model("test_vit").state_dict(), str(files / "vit.safetensors"))
    save_file(
        {**state, "fc.weight": torch.zeros(3, 96), "fc.bias": torch.zeros(3)},
        str(files / "shape.safetensors"),
    )
    torch.save({"state_dict": state, "x": RunsCode(files / "MARKER")}, files / "evil.pth")
    torch.save(timm.create_model("test_resnet"), files / "whole.pth")
    # tensors for show
    torch.save({"x": RunsCode(files / "MARKER-show")}, files / "evil.pt")
    torch.save(torch.nn.Linear(2, 2), files / "module.pt")
    torch.save({"a": torch.zeros(2)}, files / "dict.pt")
    np.save(files / "empty.npy", np.zeros((0, 3, 4, 4), np.float32))
    # plugins
    (files / "raises_plugin.py").write_text("raise ImportError('no module named foo_dependency')\n")
    (files / "empty_plugin.py").write_text("SIZE = 3\n")
    (files / "builder_plugin.py").write_text(
        "from timm.models import register_model\n\n@register_model\n"
        "def hookdump_matrix_raising(pretrained=False, **kwargs):\n"
        "    raise ValueError('depth must be even')\n"
    )
    (files / "names_plugin.py").write_text(NAMES_PLUGIN.replace("ESCAPE  #", f"{_escape(files)!r}  #"))
    (files / "oom_plugin.py").write_text(OOM_PLUGIN)
    (files / "stop_plugin.py").write_text(STOP_PLUGIN)
    (files / "gvt").mkdir()
    (files / "gvt" / "gvt.py").write_text(TWINS_FOR_OLD_TIMM.replace("alt_gvt_small", "alt_gvt_large"))
    # configs
    (files / "syntax.toml").write_text("batch_size = \n")
    (files / "unknown.toml").write_text("batchsize = 3\n")
    (files / "type.toml").write_text('batch_size = "ten"\n')
    (files / "other.json").write_text("{}\n")
    # captures: the earlier one every row keeps, an interrupted one, Swin's windows, shards of two runs
    formats = ("--format", "npy,pt,safetensors")
    _made(
        "capture", *TINY, "-l", "layer1", "-l", "layer4", "--random-input", *formats, "-o", files / "earlier"
    )
    _made("show", files / "earlier" / "layer1.npy")
    stopped = ("--import", files / "stop_plugin.py", "-m", "matrix_stop_net", "-l", "conv")
    _made("capture", *stopped, files / "photos", "--batch-size", "1", "-o", files / "interrupted", code=130)
    swin = ("img_size=56", "embed_dim=16", "depths=(1,1,1,1)", "num_heads=(1,1,1,1)")
    _made(
        "capture", "-m", "swin_tiny_patch4_window7_224", *(a for arg in swin for a in ("--model-arg", arg)),
        "--input-size", "3,56,56", "-l", "layers.0.blocks.0.attn", "--attention", "--random-input",
        "-o", files / "swin",
    )  # fmt: skip
    shard = (*TINY, "-l", "layer1", files / "photos", "--batch-size", "1")
    _made("capture", *shard, "--shard", "0/2", "-o", files / "shard0")
    _made("capture", *shard, "--shard", "1/2", "-o", files / "shard1")
    _made("capture", *shard, "--shard", "1/2", "--seed", "1", "-o", files / "other1")
    return files


# --- the contract ------------------------------------------------------------------------------------------


def _state(*roots: Path) -> dict[str, str]:
    """Every path under ``roots`` with what it is: a file's sha256, a folder, a link's target."""
    found: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            if path.is_symlink():
                found[str(path)] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                found[str(path)] = "folder"
            else:
                try:
                    found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
                except PermissionError:
                    found[str(path)] = "unreadable"
    return found


def _error_object(stdout: str, code: int, err: str) -> None:
    error = json.loads(stdout)
    assert set(error) == {"error", "kind", "exit_code", "hint", "schema_version"}, error
    assert (error["exit_code"], error["kind"]) == (code, KINDS[code]), error
    assert f"error: {error['error']}" in err and (error["hint"] or "") in err, (error, err)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_matrix(row: Row, files: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    c = Ctx(tmp_path, files)
    if row.setup is not None:
        row.setup(c, request)
    argv = [a.format(c=c) for a in row.argv]
    with_json = [argv[0], "--json", *argv[1:]]
    words = [w.format(c=c) for w in row.words]
    before = _state(c.tmp, c.files)
    runs: list[tuple[list[str], tuple[int, str, str]]] = []
    if row.console:
        args = argv if row.plain else with_json
        runs.append((args, run_unprivileged(args, c.tmp)))
    else:
        for args in (argv, with_json):
            result = _invoke(*args)
            runs.append((args, (result.exit_code, result.stdout, result.stderr)))
    for args, (code, out, err) in runs:
        assert code == row.code, (args, err)
        text = paragraph(err, *words)
        assert len(text.strip().splitlines()) > 1 or FIX.search(text), f"no fix in: {text}"
        if "--json" in args:
            _error_object(out, code, err)
        else:
            assert out == "", out
    if len(runs) == 2:
        assert runs[0][1][2] == runs[1][1][2], "the --json run said something else"
    assert _state(c.tmp, c.files) == before, "the failed run changed, added or removed files"
    for path in row.absent:
        assert not Path(path.format(c=c)).exists(), path


def test_every_row_has_its_own_id() -> None:
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids))


def test_debug_shows_the_traceback(files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOOKDUMP_DEBUG=1: the error is raised as it is (a traceback), not turned into the paragraph."""
    monkeypatch.setenv("HOOKDUMP_DEBUG", "1")
    with pytest.raises(HookdumpError, match="is not a module of test_resnet"):
        _invoke("capture", *TINY, "-l", "layerX", "--random-input", "-o", tmp_path / "o")


# --- images that are odd but valid --------------------------------------------------------------------------


def test_odd_but_valid_images_are_converted_and_recorded(tmp_path: Path) -> None:
    """16-bit, palette, LA, CMYK, RGBA and grayscale images are captured, each conversion in the manifest; a
    folder holding a symlink loop (to itself, and between two files) is walked once, without the loops."""
    photos = tmp_path / "photos"
    photos.mkdir()
    with Image.open(SKIMAGE_DATA / "chelsea.png") as image:
        gray = np.asarray(image.convert("L"))
        for mode, suffix in (("P", "png"), ("LA", "png"), ("CMYK", "jpg"), ("RGBA", "png"), ("L", "png")):
            image.convert(mode).save(photos / f"cat-{mode}.{suffix}")
    Image.fromarray(gray.astype(np.uint16) * 257).save(photos / "cat-16.png")
    (photos / "back").symlink_to(photos, target_is_directory=True)
    (photos / "x.png").symlink_to(photos / "y.png")
    (photos / "y.png").symlink_to(photos / "x.png")
    out = tmp_path / "out"
    result = _invoke("capture", *TINY, "-l", "layer1", photos, "-o", out)
    assert result.exit_code == 0, result.stderr
    conversions = {Path(i["path"]).name: i["conversion"] for i in inputs_of(out)}
    assert conversions == {
        "cat-16.png": "16-bit grayscale scaled to 8 bits (value / 257), then to RGB",
        "cat-CMYK.jpg": "CMYK to RGB",
        "cat-L.png": "8-bit grayscale to RGB",
        "cat-LA.png": "grayscale with alpha to RGB (alpha dropped)",
        "cat-P.png": "palette to RGB",
        "cat-RGBA.png": "RGBA to RGB (alpha dropped)",
    }
    assert np.load(out / "layer1.npy").shape[0] == 6


# --- Ctrl-C and SIGTERM: during the decode, the forward, the write, the final conversion -------------------

PHASES = ("decode", "forward", "write", "commit")
STOPS = [(phase, sig) for phase in PHASES for sig in (signal.SIGINT, signal.SIGTERM)]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each capture of STOPS through the console script's entry point (forked, each in a session of its own),
    stopped by its signal in its phase, all at once; and the same capture run through uninterrupted."""
    folder = tmp_path_factory.mktemp("signals")
    (folder / "photos").mkdir()
    for i in range(10):
        shutil.copy(SKIMAGE_DATA / "coffee.png", folder / "photos" / f"p{i}.png")
    (folder / "stall_plugin.py").write_text(STALL_PLUGIN)
    args = [
        "capture", "--import", str(folder / "stall_plugin.py"), "-m", "matrix_stall_net", "-l", "conv",
        "--input-size", "3,16,16", "--batch-size", "2", "--workers", "1", str(folder / "photos"),
        "--format", "npy,pt",
    ]  # fmt: skip
    runs = {}
    for phase, sig in STOPS:
        name = f"{phase}-{sig.name}"
        env = {
            **os.environ,
            "HOOKDUMP_MATRIX_PHASE": phase,
            "HOOKDUMP_MATRIX_MARK": str(folder / f"{name}.mark"),
        }
        runs[name] = forkrun.start([*args, "-o", folder / name, "--json"], env=env)  # a session of its own
    results = {}
    deadline = time.monotonic() + WAIT_S
    waiting = dict(runs)
    while waiting:
        for name, proc in list(waiting.items()):
            if (folder / f"{name}.mark").exists() and (
                folder / name / ".hookdump-partial/progress.json"
            ).exists():
                time.sleep(0.2)
                sig = signal.Signals[name.split("-")[1]]
                if sig == signal.SIGINT:
                    os.killpg(proc.pid, sig)  # Ctrl-C reaches the whole process group: the workers too
                else:
                    proc.send_signal(sig)  # as `timeout` and CI send it: to the process alone
                del waiting[name]
            elif proc.poll() is not None or time.monotonic() > deadline:
                for other in runs.values():
                    other.kill()
                pytest.fail(f"{name} never reached its phase: {proc.communicate()}")
        time.sleep(0.02)
    for name, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=120)
        results[name] = (proc.returncode, stdout, stderr)
    whole = _invoke(*args, "-o", folder / "whole")
    assert whole.exit_code == 0, whole.stderr
    return {"folder": folder, "args": args, "results": results}


@pytest.mark.parametrize(("phase", "sig"), STOPS, ids=[f"{p}-{s.name}" for p, s in STOPS])
def test_a_signal_stops_the_capture_and_resume_finishes_it_byte_identical(
    stopped: dict[str, Any], phase: str, sig: signal.Signals
) -> None:
    folder, name = stopped["folder"], f"{phase}-{sig.name}"
    out, code = folder / name, 128 + sig.value
    returncode, stdout, stderr = stopped["results"][name]
    assert returncode == code, stderr
    progress = re.compile(r"^hookdump: \d+/\d+ images, .*\n", re.MULTILINE)  # a line every 5 s off a terminal
    text = paragraph(progress.sub("", stderr), f"interrupted ({code})", f"reached `{out}`", "--resume")
    assert "Traceback" not in text
    _error_object(stdout, code, stderr)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["tensors"] == []
    done = manifest["progress"]["images_done"]
    assert manifest["progress"]["images_total"] == 10 and 2 <= done <= 10, manifest["progress"]
    assert f"{done} of 10 images reached" in text
    assert sorted(p.name for p in out.iterdir()) == [".hookdump-partial", "manifest.json"]
    again = _invoke(*stopped["args"], "-o", out)
    assert again.exit_code == 2 and "holds an interrupted capture" in again.stderr
    resumed = _invoke(*stopped["args"], "-o", out, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert f"resumed after {done} of 10 images" in resumed.stderr
    whole = folder / "whole"
    names = sorted(p.name for p in whole.iterdir())
    assert (
        names
        == sorted(p.name for p in out.iterdir())
        == ["conv.npy", "conv.pt", "inputs.parquet", "manifest.json"]
    )
    for file in ("conv.npy", "conv.pt"):
        assert (out / file).read_bytes() == (whole / file).read_bytes(), file
    assert inputs_of(out) == inputs_of(whole)


def test_ctrl_c_while_the_files_move_into_place_waits_for_them(
    files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGINT sent in the last step (the old capture's files removed, the new ones moved in, the
    manifest written) is held until the step is done: the capture is whole, and the run says so, exit 130."""
    import hookdump.store.folder.commit

    out = tmp_path / "earlier"
    shutil.copytree(files / "earlier", out)
    finish = hookdump.store.folder.commit.finish

    def interrupted(folder: Path) -> bool:
        os.kill(os.getpid(), signal.SIGINT)
        return finish(folder)

    monkeypatch.setattr(hookdump.store.folder.commit, "finish", interrupted)
    result = _invoke("capture", *TINY, "-l", "conv1", "--random-input", "-o", out, "--overwrite", "--json")
    assert result.exit_code == 130, result.stderr
    paragraph(result.stderr, f"interrupted (130): the capture had finished: `{out}` holds it, complete.")
    _error_object(result.stdout, 130, result.stderr)
    assert sorted(p.name for p in out.iterdir()) == ["conv1.npy", "manifest.json"]  # (one random input)
    assert json.loads((out / "manifest.json").read_text())["complete"] is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
