"""Shared fixtures: real photos from the scikit-image wheel, the plugin folder, a CLI runner."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import skimage
from typer.testing import CliRunner

from hookdump.cli.app import app

SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
PLUGINS = Path(__file__).parent / "plugins"
CHECKOUT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _work_in_a_temporary_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the current folder: each runs in a fresh empty one (the default --out)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


def _checkout_state() -> str | None:
    """Every file git lists in the checkout, ignored ones included (caches aside); None outside git."""
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
            cwd=CHECKOUT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    skip = (".venv/", "__pycache__", ".egg-info", "_cache/")
    return "\n".join(line for line in proc.stdout.splitlines() if not any(s in line for s in skip))


def pytest_sessionstart(session: pytest.Session) -> None:
    # A shell without job control starts a background job with SIGINT ignored, and the tests' children
    # would inherit that (their Ctrl-C tests could not stop them): a handler is reset to the default at exec.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # HOOKDUMP_SHARED_CHECKOUT=1: others are editing this checkout at the same time; their new files
    # are not this run's doing, so the check is off.
    shared = os.environ.get("HOOKDUMP_SHARED_CHECKOUT") == "1"
    session.config.stash[_STATE] = None if shared else _checkout_state()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # pytest -n N: N workers side by side, each with the CPU threads of the whole machine would fight
        # over the cores (and spin waiting for them); one thread each for the in-process tests. The
        # console scripts the tests start keep torch's default.
        import torch

        torch.set_num_threads(1)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves the checkout as it found it: a test that writes into it fails the run."""
    before, after = session.config.stash.get(_STATE, None), _checkout_state()
    if before is None or after is None:
        return
    new = sorted(set(after.splitlines()) - set(before.splitlines()))
    written = [line[3:] for line in new if line.startswith(("??", "!!"))]  # files that were not there
    if written:
        print(f"\nerror: the tests wrote into the checkout: {', '.join(written)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STATE = pytest.StashKey[str | None]()

#: How long a test waits for a process it started to get somewhere (a file to appear, a count to be
#: reached) before it fails: a deadline, not a timing check; each wait polls its condition and gives up at
#: once when the process exits. Generous, because a loaded 2-core machine runs tests side by side.
WAIT_S = 600.0


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now: torchrun's rendezvous port (its default, 29500,
    would be shared by two torchrun tests running at the same time under pytest -n)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def chelsea() -> Path:
    """A real photo of a tabby cat (public domain, scikit-image)."""
    return SKIMAGE_DATA / "chelsea.png"


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    """A folder of three real photos, one of them in a sub-folder."""
    folder = tmp_path / "photos"
    (folder / "more").mkdir(parents=True)
    shutil.copy(SKIMAGE_DATA / "chelsea.png", folder / "chelsea.png")
    shutil.copy(SKIMAGE_DATA / "coffee.png", folder / "coffee.png")
    shutil.copy(SKIMAGE_DATA / "astronaut.png", folder / "more" / "astronaut.png")
    return folder


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """An empty folder with a short path (in the system's temporary folder, removed after the test), for a
    child's TMPDIR. multiprocessing makes its AF_UNIX sockets there (``pymp-*/listener-*``), whose paths may
    have at most 107 bytes: under pytest -n, ``tmp_path`` (``.../popen-gw1/<test name>``) can be so long
    that a DataLoader worker fails to send its batch (``AF_UNIX path too long``) and the capture waits for
    it for ever."""
    folder = Path(tempfile.mkdtemp(prefix="hookdump-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def plugins() -> Path:
    return PLUGINS


class Cli:
    """Runs the real Typer app in-process; stdout and stderr kept apart."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str | Path) -> object:
        return self.runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def cli() -> Cli:
    return Cli()


def resumed_and_sharded(model: Any, photos: Any, layer: str, folder: Path) -> dict[str, np.ndarray]:
    """``layer`` of ``photos`` three ways through the API, one photo per batch: a capture stopped after its
    first batch (Ctrl-C) then ``resume``d, and two shards (``0/2``, ``1/2``) joined by ``merge``; each
    checked to be whole, for a comparison with an uninterrupted capture."""
    from hookdump import api
    from hookdump.capture.merge import merge

    def stop(done: int, total: int, written: int) -> None:
        raise KeyboardInterrupt

    options = {"model": model, "batch_size": 1, "workers": 0}
    try:
        api.capture(photos, [layer], out=folder / "resumed", on_batch=stop, **options)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the capture was not stopped")
    done = api.capture(photos, [layer], out=folder / "resumed", resume=True, **options)
    assert "resumed after 1 of " in " ".join(done.notes), done.notes
    shards = [folder / f"shard{i}" for i in range(2)]
    for i, shard in enumerate(shards):
        api.capture(photos, [layer], out=shard, shard=f"{i}/2", **options)
    merge(shards, folder / "merged")
    return {how: np.load(folder / how / f"{layer}.npy") for how in ("resumed", "merged")}


def inputs_of(out: Path) -> list[dict[str, Any]]:
    """A capture's input records, wherever they are (its ``inputs.parquet``, or an older manifest's list),
    through ``hookdump.open``."""
    import hookdump

    return hookdump.open(out).inputs
