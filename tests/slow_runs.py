"""The console script run in a process of its own on the behaviour plugin's ``slow_net`` (it sleeps
``HOOKDUMP_TEST_SLEEP`` seconds a batch), watched as it goes and stopped part-way: for the tests of
interrupted, resumed and concurrent captures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import forkrun
from common import PLUGINS, SKIMAGE_DATA, WAIT_S

PLUGIN = PLUGINS / "behaviour_plugin.py"
#: slow_net's conv, one photo a batch; and its conv and act, three photos a batch.
SLOW_BY_1 = ("--import", str(PLUGIN), "-m", "slow_net", "-l", "conv", "--batch-size", "1")
SLOW_BY_3 = ("--import", str(PLUGIN), "-m", "slow_net", "-l", "conv", "-l", "act", "--batch-size", "3")


def coffee_photos(folder: Path, n: int) -> Path:
    """``n`` copies of the coffee photo in a new folder."""
    folder.mkdir(parents=True)
    for i in range(n):
        shutil.copy(SKIMAGE_DATA / "coffee.png", folder / f"p{i:02d}.png")
    return folder


def mixed_photos(folder: Path, n: int) -> Path:
    """``n`` photos in a new folder, four real ones in turn (PNG and JPEG)."""
    folder.mkdir(parents=True)
    names = ["coffee.png", "chelsea.png", "astronaut.png", "rocket.jpg"]
    for i in range(n):
        shutil.copy(SKIMAGE_DATA / names[i % len(names)], folder / f"p{i:02d}{Path(names[i % 4]).suffix}")
    return folder


def start_run(args: list[str], **env: str) -> forkrun.Started:
    """The console script's entry point started on ARGS (forked: :mod:`forkrun`), in a session of its own,
    its output kept, sleeping 0.5 s a batch unless ``env`` says."""
    return forkrun.start(args, env={**os.environ, "HOOKDUMP_TEST_SLEEP": "0.5", **env})


def wait_for(pattern: str, folder: Path, proc: forkrun.Started, timeout: float = WAIT_S) -> Path:
    """The first file of ``folder`` that matches ``pattern``, once there; fails if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(folder.glob(pattern)) if folder.is_dir() else []
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"{pattern} never appeared in {folder}")


def images_done(out: Path) -> int:
    """How many images an unfinished capture in ``out`` says it has written (0 before it says)."""
    try:
        return int(json.loads((out / ".hookdump-partial" / "progress.json").read_text())["images"])
    except (OSError, ValueError, KeyError):
        return 0


def kill_when(run, out: Path, images: int, sig: int = signal.SIGKILL) -> None:
    """Sends ``sig`` to the capture ``run`` once it has written ``images`` images, and waits for its end."""
    wait_for(".hookdump-partial/progress.json", out, run)
    while images_done(out) < images:  # polled, not spun: the capture needs the cores
        assert run.poll() is None, run.communicate()
        time.sleep(0.02)
    run.send_signal(sig)
    run.communicate(timeout=60)
