"""A capture stopped from outside, as schedulers and terminals stop it: kill -9 of the main process while its
decoding workers live on, SIGTERM or Ctrl-C to the whole process group, and the same under torchrun; each
ends with the documented exit code, keeps its progress, and --resume finishes the single-process bytes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_dataset import _photos, _progress
from test_runs import PLUGIN

EXE = shutil.which("hookdump", path=str(Path(sys.executable).parent))
SLOW = ("--import", str(PLUGIN), "-m", "slow_net", "-l", "conv", "-l", "act", "--batch-size", "2")
FORMATS = ("--format", "npy,pt,safetensors")
DEADLINE = 120.0


def _run(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *map(str, args)], capture_output=True, text=True, timeout=600,
        env={**os.environ, "HOOKDUMP_TEST_SLEEP": "0.2", **(env or {})},
    )  # fmt: skip


def _start(*args: object) -> subprocess.Popen[str]:
    """The console script in a process group of its own, as a terminal, Slurm or systemd starts it."""
    return subprocess.Popen(
        [EXE, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "HOOKDUMP_TEST_SLEEP": "0.2"}, start_new_session=True,
    )  # fmt: skip


def _wait_until(done, what: str, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before {what}: {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what}")
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] not in "ZX"
    except OSError:
        return False


def _same_capture(whole: Path, out: Path) -> None:
    names = sorted(p.name for p in whole.iterdir() if p.name != "manifest.json")
    assert names == sorted(p.name for p in out.iterdir() if p.name != "manifest.json")
    for name in names:
        assert (whole / name).read_bytes() == (out / name).read_bytes(), name
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (whole, out)]
    assert manifests[1]["complete"] is True and manifests[0]["inputs"] == manifests[1]["inputs"]


@pytest.fixture
def whole(tmp_path: Path) -> tuple[Path, Path]:
    photos, out = _photos(tmp_path / "photos", 24), tmp_path / "whole"
    done = _run("capture", *SLOW, photos, *FORMATS, "-o", out)
    assert done.returncode == 0, done.stderr
    return photos, out


def test_kill_9_then_resume_at_once_while_the_decoding_workers_live_on(
    tmp_path: Path, whole: tuple[Path, Path]
) -> None:
    """The workers inherit the lock's descriptor; they must not keep the folder locked for its dead owner."""
    photos, reference = whole
    out = tmp_path / "out"
    run = _start("capture", *SLOW, photos, *FORMATS, "-o", out)  # default --workers: more than one batch
    _wait_until(lambda: _progress(out) >= 4, "reached 4 images", run)
    workers = _children(run.pid)
    assert workers, "no decoding worker to outlive its parent"
    os.kill(run.pid, signal.SIGKILL)  # the main process only, as the OOM killer does
    run.wait(timeout=60)  # not communicate: the orphans hold its pipes open
    done = _run("capture", *SLOW, photos, *FORMATS, "-o", out, "--resume")
    assert done.returncode == 0, done.stderr
    assert "resumed after" in done.stderr
    _same_capture(reference, out)
    _wait_until(lambda: not any(_alive(w) for w in workers), "orphaned workers exited")
    run.communicate(timeout=60)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_process_group_stops_the_run_and_keeps_its_progress(
    tmp_path: Path, whole: tuple[Path, Path], sig: int, code: int
) -> None:
    """Slurm, systemd and torchrun signal the whole group, so the decoding workers get it too (three of them:
    with one worker the main process usually wins the race that lost the run)."""
    photos, reference = whole
    out = tmp_path / "out"
    run = _start("capture", *SLOW, photos, *FORMATS, "-o", out, "--workers", "3")
    _wait_until(lambda: _progress(out) >= 4, "reached 4 images", run)
    os.killpg(run.pid, sig)
    _, err = run.communicate(timeout=120)
    assert run.returncode == code, err
    assert f"error: interrupted ({code}): " in err and "--resume" in err and "Traceback" not in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["progress"]["images_done"] >= 4
    done = _run("capture", *SLOW, photos, *FORMATS, "-o", out, "--resume", "--workers", "3")
    assert done.returncode == 0, done.stderr
    _same_capture(reference, out)
