"""The preflight's (and --resume's) checks of many inputs, spread over forked processes (``inputs/forks.py``):
the same answer as one process checking each input in order, and no process left behind however the run
stops."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import forkrun
import numpy as np
import pytest
from helpers import in_session
from PIL import Image

from hookdump.errors import InputError
from hookdump.inputs import files, forks
from hookdump.inputs.spec import InputSpec
from hookdump.store.folder import journal

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inputs are checked in one process elsewhere")


def _tiny(folder: Path, count: int) -> list[Path]:
    """``count`` 16x16 PNGs."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    paths = [folder / f"{i:03d}.png" for i in range(count)]
    for path in paths:
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(path)
    return paths


@pytest.fixture
def three(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three processes, whatever the machine: the parent's slice and two children's."""
    monkeypatch.setattr(forks, "processes", lambda inputs: 3)


@pytest.mark.usefixtures("three")
def test_spread_checks_skip_and_refuse_the_inputs_one_process_would(tmp_path: Path) -> None:
    paths = _tiny(tmp_path / "p", 30)
    cut = paths[0].read_bytes()[:40]  # a PNG cut short: its header check fails
    for i, data in {11: cut, 12: b"", 25: b"not an image at all"}.items():
        paths[i].write_bytes(data)
    skipped: list[dict[str, str]] = []
    where: list[int] = []
    kept = files.collect(InputSpec((str(tmp_path / "p"),)), (), skipped, where)
    assert [Path(s["path"]).name for s in skipped] == ["011.png", "012.png", "025.png"]
    assert "empty (0 bytes)" in skipped[1]["reason"] and where == [11, 11, 23]
    assert kept == [p for i, p in enumerate(paths) if i not in (11, 12, 25)]
    with pytest.raises(InputError, match=r"011\.png"):  # the first in input order, though a child's
        files.collect(InputSpec((str(tmp_path / "p"),)))
    for i in (11, 12):
        paths[i].write_bytes(paths[0].read_bytes())
    with pytest.raises(InputError, match=r"025\.png"):  # in the last child's slice
        files.collect(InputSpec((str(tmp_path / "p"),)))


@pytest.mark.usefixtures("three")
def test_each_slice_is_checked_in_a_process_of_its_own_and_a_dead_childs_again(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.png" for i in range(9)]

    def whose(path: Path) -> None:
        raise InputError(f"{os.getpid()} {path.name}")

    found = forks.failures(paths, whose, first_only=False)
    assert [i for i, _ in found] == list(range(9))
    pids = [exc.message.split()[0] for _, exc in found]
    assert pids[:3] == [str(os.getpid())] * 3 and len(set(pids)) == 3  # 0-2 here, 3-5 and 6-8 in children
    parent = os.getpid()

    def dies_in_a_child(path: Path) -> None:
        if os.getpid() != parent and path.name == "7.png":
            os._exit(3)
        if path.name in ("4.png", "7.png"):
            raise InputError(path.name, "the fix")

    found = forks.failures(paths, dies_in_a_child, first_only=False)
    said = [(i, exc.message, exc.hint) for i, exc in found]
    assert said == [(4, "4.png", "the fix"), (7, "7.png", "the fix")]


SLOW_CHECKS = """
    import os, sys, time
    from pathlib import Path
    from hookdump.inputs import forks
    forks.processes = lambda inputs: 3
    parent = os.getpid()
    def slow(path):
        if os.getpid() == parent and path.name == "1":
            print("forked", flush=True)
        time.sleep(float(sys.argv[1]))
    forks.failures([Path(str(i)) for i in range(30)], slow, first_only=False)
"""


def _gone(session: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while in_session(session):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


STOPS = [(signal.SIGKILL, 0.2, 20.0), (signal.SIGINT, 6.0, 20.0)]  # the signal, a check's seconds, the wait


@pytest.mark.parametrize(("sig", "check", "within"), STOPS)
def test_no_child_outlives_its_parent(sig: int, check: float, within: float) -> None:
    """SIGKILLed, the parent cannot stop its children: each finishes its slice (10 checks of 0.2 s) and exits.
    Ctrl-C: the parent kills them as it stops, long before their slices (10 checks of 6 s) would end."""
    run = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SLOW_CHECKS), str(check)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert run.stdout is not None and run.stdout.readline() == "forked\n"
        assert len(in_session(run.pid)) == 3
        os.kill(run.pid, sig)
        run.wait(timeout=60)
        assert _gone(run.pid, within), in_session(run.pid)
    finally:
        if run.poll() is None:
            run.kill()
        for pid in in_session(run.pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.usefixtures("three")
def test_a_fork_refused_leaves_its_slice_to_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit on processes (EAGAIN) is no error of the user's: the slice without a child is checked here."""
    paths = [tmp_path / f"{i}.png" for i in range(9)]
    forks_made: list[int] = []
    real_fork = os.fork

    def fork_once() -> int:  # the first fork is real, the second is refused
        if forks_made:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        forks_made.append(1)
        return real_fork()

    monkeypatch.setattr(forks.os, "fork", fork_once)

    def whose(path: Path) -> None:
        raise InputError(f"{os.getpid()} {path.name}")

    open_files = len(os.listdir("/proc/self/fd"))
    found = forks.failures(paths, whose, first_only=False)
    assert len(os.listdir("/proc/self/fd")) == open_files  # the pipes closed, the refused fork's too
    assert [exc.message.split()[1] for _, exc in found] == [p.name for p in paths]
    pids = [exc.message.split()[0] for _, exc in found]
    assert pids[6:] == [str(os.getpid())] * 3 and len(set(pids)) == 2  # slice 2 here, slice 1 in a child


@pytest.mark.usefixtures("three")
def test_resume_hashes_the_captured_inputs_spread_and_names_the_first_changed(tmp_path: Path) -> None:
    """``--resume``'s check that each input already captured still holds its bytes runs in the three
    processes too, and names the first changed input in input order, though a child found it."""
    paths = _tiny(tmp_path / "p", 30)
    out = tmp_path / "out"
    args = ["capture", "-m", "test_resnet", "--input-size", "3,16,16", "-l", "layer1", str(tmp_path / "p")]
    killed = forkrun.run(
        [*args, "--batch-size", "2", "-o", str(out)],
        env={**os.environ, "HOOKDUMP_TEST_KILL_AT": "checkpoint-12"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    progress = journal.read_progress(out)
    assert progress is not None and progress["batches"] == 12
    originals = {i: paths[i].read_bytes() for i in (7, 20)}
    paths[20].write_bytes(originals[20][:-1] + b"\0")  # in the last child's slice (inputs 16 to 23)
    with pytest.raises(InputError, match=r"020\.png.* changed since"):
        journal.check_inputs_unchanged(out, progress)
    paths[7].write_bytes(b"")  # in the parent's slice, before the other
    with pytest.raises(InputError, match=r"007\.png.*changed since"):
        journal.check_inputs_unchanged(out, progress)
    for i, data in originals.items():
        paths[i].write_bytes(data)
    records = journal.check_inputs_unchanged(out, progress)
    assert [r["path"] for r in records] == [str(p) for p in paths[:24]]
    assert [r["sha256"] for r in records] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths[:24]]
