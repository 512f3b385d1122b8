"""What the tests of the command line's errors share (its messages, its matrix, the claims of the store):
the tiny capture, the console script run as a user without root's rights, and inputs that must be refused
(a decompression bomb, a pickle that would run code, an old timm's Twins plugin)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import forkrun
import pytest

EXE = shutil.which("hookdump", path=str(Path(sys.executable).parent))
TINY = ("-m", "test_resnet", "--input-size", "3,32,32", "-l", "layer1")
CLI_ROOT = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]

TWINS_FOR_OLD_TIMM = """
from timm.models.registry import register_model  # timm 0.x's import path: timm warns, hookdump does not
from torch import nn

class ALTGVT(nn.Module):
    def __init__(self, depths=(2, 2), num_classes=1000):
        super().__init__()
        self.head = nn.Linear(8, num_classes)

@register_model
def alt_gvt_small(pretrained=False, **kwargs):  # as the Twins repository's gvt.py: kwargs go to the class
    return ALTGVT(depths=(2, 2, 10, 4), **kwargs)
"""


def run_unprivileged(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """The console script's (exit code, stdout, stderr); as root, without the capabilities that let root read
    and write any file."""
    prefix: list[str] = []
    if os.geteuid() == 0:  # root reads and writes anything: run without the capabilities that allow it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root, and no setpriv to drop the right to read and write any file")
        prefix = CLI_ROOT
    assert EXE is not None
    if prefix:
        proc = subprocess.run([*prefix, EXE, *argv], capture_output=True, text=True, cwd=cwd, timeout=300)
    else:
        proc = forkrun.run(argv, cwd=cwd, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def png_of_zeros(path: Path, side: int) -> Path:
    """A real 1-bit PNG of side x side black pixels: a few KB on disk, `side**2` pixels when decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row = zlib.compressobj(9), b"\0" * (1 + (side + 7) // 8)
    data = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )
    return path


class RunsCode:
    """Unpickling this would create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))
