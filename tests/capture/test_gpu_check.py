"""scripts/gpu_check.sh --quick, as CI runs it: on a machine without CUDA every CUDA part says it was
skipped, the CPU capture equals itself decoded in process, and the script exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from common import CHECKOUT

SCRIPT = CHECKOUT / "scripts" / "gpu_check.sh"


def test_gpu_check_runs_on_cpu_and_skips_the_cuda_parts(tmp_path: Path) -> None:
    import torch

    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPT.parent.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--quick"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("gpu check: ok")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the CUDA parts ran instead of being skipped")
    lines = proc.stdout.splitlines()
    assert sum("skipped (no CUDA device)" in line for line in lines) == 4, proc.stdout
    assert "CPU against CPU decoded in process: 0.0e+00" in proc.stdout
    assert not list(tmp_path.glob("hookdump-gpu-check-*"))  # its temporary folder is gone
