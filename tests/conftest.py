"""Shared fixtures: real photos from the scikit-image wheel, the plugin folder, a CLI runner, real weights."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The helper modules' asserts explain themselves as a test's do (they were the test files' own helpers).
pytest.register_assert_rewrite(
    "cli_errors", "common", "dataset_inputs", "helpers", "read_back", "s3server", "slow_runs"
)

from common import CHECKOUT, PLUGINS, SKIMAGE_DATA, Cli, checkout_files, written_into_checkout  # noqa: E402

LITE0_SCRIPT = CHECKOUT / "scripts" / "lite0_checkpoint.py"


@pytest.fixture(autouse=True)
def _work_in_a_temporary_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the current folder: each runs in a fresh empty one (the default --out);
    nor the user's cache: fetched inputs go to a cache of the test's own (``HOOKDUMP_CACHE``)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    monkeypatch.setenv("HOOKDUMP_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def s3() -> Iterator[Any]:
    """A real S3-compatible server on 127.0.0.1 (moto's; ``s3server.S3``), for the session."""
    from s3server import S3  # for speed: boto3 and moto load only for the tests that use them

    server = S3()
    yield server
    server.stop()


def pytest_sessionstart(session: pytest.Session) -> None:
    # A shell without job control starts a background job with SIGINT ignored, and the tests' children
    # would inherit that (their Ctrl-C tests could not stop them): a handler is reset to the default at exec.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    session.config.stash[_STATE] = checkout_files()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # pytest -n N: N workers side by side, each with the CPU threads of the whole machine would fight
        # over the cores (and spin waiting for them); one thread each for the in-process tests. The
        # console scripts the tests start keep torch's default.
        import torch

        torch.set_num_threads(1)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves the checkout as it found it: a test that writes into it fails the run."""
    written = written_into_checkout(session.config.stash.get(_STATE, None))
    if written:
        print(f"\nerror: the tests wrote into the checkout: {', '.join(written)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STATE = pytest.StashKey[set[str] | None]()


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


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture(scope="module")
def lite0_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's recipe: the package's 296 tensors re-keyed, in order, onto timm's names."""
    path = tmp_path_factory.mktemp("lite0") / "efficientnet_lite0.safetensors"
    done = subprocess.run([sys.executable, LITE0_SCRIPT, path], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "wrote 296 tensors" in done.stdout
    return path
