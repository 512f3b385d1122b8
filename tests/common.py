"""What the tests of every wing share that is not a fixture: where things are (the checkout, its plugins,
scikit-image's photos), how long to wait for a process, what git lists in the checkout, a free port,
torchrun's command line, the CLI run in-process, a capture's input records, the one-paragraph error check,
and every command a docs page shows."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import skimage
from typer.testing import CliRunner

from hookdump.cli.app import app

SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
PLUGINS = Path(__file__).parent / "plugins"
CHECKOUT = Path(__file__).resolve().parent.parent
README = CHECKOUT / "README.md"


#: How long a test waits for a process it started to get somewhere (a file to appear, a count to be
#: reached) before it fails: a deadline, not a timing check; each wait polls its condition and gives up at
#: once when the process exits. Generous, because a loaded 2-core machine runs tests side by side.
WAIT_S = 600.0


def checkout_files() -> set[str] | None:
    """Every file git lists in the checkout, untracked and ignored ones included (caches aside), as
    ``git status --porcelain`` lines; None outside git, and with ``HOOKDUMP_SHARED_CHECKOUT=1`` (others are
    editing this checkout at the same time: their new files are not this run's doing)."""
    if os.environ.get("HOOKDUMP_SHARED_CHECKOUT") == "1":
        return None
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
    return {line for line in proc.stdout.splitlines() if not any(s in line for s in skip)}


def written_into_checkout(before: set[str] | None) -> list[str]:
    """The files in the checkout now that were not there at ``before`` (:func:`checkout_files`); none where
    either is not known."""
    after = checkout_files()
    if before is None or after is None:
        return []
    return sorted(line[3:] for line in after - before if line.startswith(("??", "!!")))


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now: torchrun's rendezvous port (its default, 29500,
    would be shared by two torchrun tests running at the same time under pytest -n)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def torchrun(
    args: list[Any] | tuple[Any, ...], tmp: Path, *, forked: bool = True, **env: str
) -> tuple[list[str], dict[str, str]]:
    """torchrun's command line for two CPU ranks of ``hookdump ARGS`` (each forked from the test process's
    server unless ``forked=False``: :func:`forkrun.torchrun`), and its environment: this one without a rank
    of its own, ``env`` added, torchrun's log folders (and the ranks' temporary files) in ``tmp`` (the test's
    ``short_tmp``, not /tmp), a free rendezvous port of its own (``PET_MASTER_PORT``: ``--master-port``)."""
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    base |= {"TMPDIR": str(tmp), "PET_MASTER_PORT": str(free_port()), **env}
    return forkrun.torchrun([*args, "--device", "cpu"], env=base, forked=forked)


class Cli:
    """Runs the real Typer app in-process; stdout and stderr kept apart."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str | Path) -> object:
        return self.runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def paragraph(err: str, *words: str) -> str:
    """The one `error:` paragraph of ``err`` (only notes before it, no traceback, no usage box), holding each
    of ``words``; returns it."""
    assert "Traceback" not in err and "failed unexpectedly" not in err, err
    assert err.count("error: ") == 1, err
    before, _, text = err.partition("error: ")
    assert all(line.startswith("note: ") for line in before.splitlines()), err  # notes only, before it
    assert "\n\n" not in text.strip() and "Usage:" not in text and "╭" not in text, err
    for word in words:
        assert word in text, f"{word!r} not in:\n{err}"
    return text


def readme_commands(page: Path = README) -> list[tuple[str, list[str]]]:
    """Every command a page (the README by default) shows (bash blocks, and `$ ` lines of transcripts), in
    order, each with the comment lines right after it (what it prints)."""
    import re

    found: list[tuple[str, list[str]]] = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", page.read_text(), re.S):
        if lang not in ("bash", "text"):
            continue
        for line in body.splitlines():
            text = line.removeprefix("$ ") if lang == "text" else line
            if lang == "text" and not line.startswith("$ "):
                if found and found[-1][1] is not None:
                    found[-1][1].append(line)
                continue
            if text.startswith("#") and found:
                found[-1][1].append(text)
            elif text.strip() and not text.startswith("#"):
                found.append((text.split("  #")[0].strip(), []))
    return found


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
