"""The test harness that forks the console script's runs (tests/forkrun.py, tests/forkrank.py) against
what it stands for: ``subprocess.run`` / ``Popen`` of the installed console script, and torchrun's ranks."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import forkrun
import pytest
from common import PLUGINS, SKIMAGE_DATA, torchrun

SLOW = ("--import", str(PLUGINS / "behaviour_plugin.py"), "-m", "slow_net", "-l", "conv", "--batch-size", "1")


def test_runs_that_end_at_once_each_give_their_own_code_and_streams(tmp_path: Path) -> None:
    """Eight runs at once, each ending as soon as it starts (the exit code may reach the server before its
    pid reached the test): each has its own code and output, as the installed console script gives them."""
    assert forkrun.EXE is not None
    real = [
        subprocess.run([forkrun.EXE, *a], capture_output=True, text=True) for a in (["--version"], ["nope"])
    ]
    runs = [forkrun.start(["--version"] if i % 2 else ["nope"], cwd=tmp_path) for i in range(8)]
    ended = [(run.wait(120), *run.communicate()) for run in runs]
    for i, (code, out, err) in enumerate(ended):
        want = real[0] if i % 2 else real[1]
        assert (code, out, err) == (want.returncode, want.stdout, want.stderr)
    assert real[0].returncode == 0 and real[1].returncode == 2
    assert isinstance(runs[0], forkrun.Forked)  # this environment is the server's: forked, not a fresh one


def test_a_started_run_has_a_session_of_its_own_and_ends_as_its_signal_ends_it(tmp_path: Path) -> None:
    run = forkrun.start(["capture", *SLOW, SKIMAGE_DATA / "coffee.png", "-o", tmp_path / "out"],
                        env={**os.environ, "HOOKDUMP_TEST_SLEEP": "60"})  # fmt: skip
    assert os.getsid(run.pid) == run.pid and run.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        run.wait(0.2)
    run.kill()
    assert run.wait(60) == -signal.SIGKILL


def test_an_environment_read_at_start_gets_a_fresh_interpreter() -> None:
    proc = forkrun.start(["--version"], env={**os.environ, "PYTHONHASHSEED": "7"})
    assert isinstance(proc, subprocess.Popen)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.startswith("hookdump ")


def test_torchrun_ranks_forked_end_as_fresh_ranks_end(tmp_path: Path, short_tmp: Path) -> None:
    """A rank that fails (exit 3, a layer that is not there) fails torchrun alike, forked or fresh: its exit
    code in torchrun's report, its paragraph (torchrun may stop the other rank first: exit 143)."""
    args = ["capture", "-m", "test_resnet", "-l", "nope", "--random-input", "-o", tmp_path / "o"]
    for forked in (True, False):
        command, env = torchrun(args, short_tmp, forked=forked)
        assert ("forkrank.py" in " ".join(command)) == forked
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 1 and "exitcode  : 3" in done.stderr, done.stderr[-3000:]
        assert "error: `nope` is not a module of test_resnet.\nRun `hookdump list-modules" in done.stderr
