"""Issue 18's cases where exit 0 (or the wrong code) hid wrong or lost data, through the real console
script: closed standard streams, config values, dry runs, checkpoints, notes."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_messages import EXE, TINY, paragraph


def closed(tmp_path: Path, args: tuple[object, ...], redirect: str) -> subprocess.CompletedProcess[str]:
    """The console script with a standard stream closed by the shell (``>&-``), as a cron job or a
    daemon may start it; the other stream, if open, is captured."""
    line = " ".join(shlex.quote(str(a)) for a in (EXE, *args))
    return subprocess.run(
        ["bash", "-c", f"exec {line} {redirect}"], capture_output=True, text=True, cwd=tmp_path
    )


# --- 12: closed standard streams -------------------------------------------------------------------------


@pytest.mark.parametrize("redirect", [">&-", "2>&-", ">&- 2>&- <&-"])
def test_capture_with_a_closed_stream_works(tmp_path: Path, chelsea: Path, redirect: str) -> None:
    out = tmp_path / "o"
    proc = closed(tmp_path, ("capture", chelsea, *TINY, "-o", out, "--json"), redirect)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert np.load(out / "layer1.npy").shape == (1, 32, 8, 8)
    assert json.loads((out / "manifest.json").read_text())["tensors"]
    if not redirect.startswith(">&-"):  # stdout open: the JSON is there, whole
        assert json.loads(proc.stdout)["tensors"]


@pytest.mark.parametrize("redirect", [">&-", "2>&-"])
def test_layer_error_with_a_closed_stream_exits_3(tmp_path: Path, chelsea: Path, redirect: str) -> None:
    proc = closed(tmp_path, ("capture", chelsea, "-m", "test_resnet", "-l", "nosuch", "-o", "o"), redirect)
    assert proc.returncode == 3, proc.stderr
    if redirect == ">&-":
        paragraph(proc.stderr, "`nosuch` is not a module of test_resnet")
    assert not (tmp_path / "o").exists()
