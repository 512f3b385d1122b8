"""Issue 35: every command that writes files goes through the store's one check of what it may write
(``hookdump/store/folder/claims.py``): hookdump replaces only files it wrote, never a user's.

One parametrized test over the commands of the Typer app itself (a command added tomorrow fails here until
it has a recipe below) x each situation: a user's file of each name the command would write; a read-only
folder; the output path is a file; the output folder is the folder it reads. Each must end with its
documented exit code, no traceback, and leave every file that was there byte for byte as it was. Commands
that write nothing are run too, and must leave the folders as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import forkrun
import pytest
import typer.main
from cli_errors import run_unprivileged
from common import SKIMAGE_DATA

from hookdump.cli.app import app
from hookdump.store.folder.record import RECORD

MODEL = ("-m", "resnet18", "--input-size", "3,64,64")
USER = b"the user's own bytes\n"


@dataclass
class Captures:
    """Made once for the module: photos, a capture of them (no pictures), and its two shards."""

    root: Path
    photos: Path = field(init=False)
    cap: Path = field(init=False)
    shards: tuple[Path, Path] = field(init=False)

    def __post_init__(self) -> None:
        self.photos, self.cap = self.root / "photos", self.root / "cap"
        self.shards = (self.root / "part0", self.root / "part1")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Captures:
    c = Captures(tmp_path_factory.mktemp("claims"))
    c.photos.mkdir()
    for name in ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg"):
        shutil.copy(SKIMAGE_DATA / name, c.photos / name)
    runs = [
        ("capture", *MODEL, "-l", "layer1", c.photos, "-o", c.cap),
        *[
            ("capture", *MODEL, "-l", "layer1", c.photos, "--batch-size", "2", "--shard", f"{i}/2", "-o", p)
            for i, p in enumerate(c.shards)
        ],
    ]
    for args in runs:
        proc = forkrun.run(args, cwd=c.root)
        assert proc.returncode == 0, proc.stderr
    return c


@dataclass(frozen=True)
class Recipe:
    """How a command writes into folder ``{out}``: its arguments, the names it writes there (``sub/x``: a
    file in a subfolder it replaces whole), and the exit code when ``{out}`` is the folder it reads."""

    argv: Callable[[Captures, Path], list[object]]
    names: tuple[str, ...]
    reads_from: Callable[[Captures], Path]  # the folder it reads (its input, as the output)
    same_folder_code: int  # exit code with --out the folder it reads: 0 where that is where it writes
    is_file_code: int = 2


WRITERS: dict[str, list[Recipe]] = {
    "capture": [
        Recipe(
            lambda c, out: ["capture", *MODEL, "-l", "layer1", c.photos, "--png", "-o", out],
            ("layer1.npy", "manifest.json", "layer1.png", "layer1.overlay.png"),
            lambda c: c.photos,
            2,
        )
    ],
    "merge": [
        Recipe(
            lambda c, out: ["merge", *c.shards, "-o", out],
            ("layer1.npy", "manifest.json"),
            lambda c: c.shards[0],
            2,
        )
    ],
    "show": [
        Recipe(lambda c, out: ["show", c.cap / "layer1.npy", "-o", out], ("layer1.png",), lambda c: c.cap, 0),
        Recipe(
            lambda c, out: ["show", c.cap, "--index", "all", "-o", out],
            ("layer1.img3.png",),
            lambda c: c.cap,
            0,
        ),
    ],
    "compare": [
        Recipe(
            lambda c, out: ["compare", c.cap, "--png", "-o", out], ("cka.png", "cka.json"), lambda c: c.cap, 0
        ),
        Recipe(
            lambda c, out: ["compare", c.cap, "--metric", "rsa", "-o", out],
            ("rdm", "rdm/notes.txt"),
            lambda c: c.cap,
            0,
        ),
    ],
    "top": [
        Recipe(
            lambda c, out: ["top", c.cap, "-l", "layer1", "--channels", "0:2", "-k", "2", "--sheets", out],
            ("channel-0.png", "channel-1.png", "top.json"),
            lambda c: c.cap,
            0,
        )
    ],
    "report": [  # writes into the capture it reads: {out} is a copy of it
        Recipe(
            lambda c, out: ["report", out], ("index.html", "report", "report/mine.txt"), lambda c: c.cap, 0, 4
        )
    ],
}
#: Commands that write no file: run on the capture, they must leave every folder as it was.
READERS: dict[str, Callable[[Captures], list[object]]] = {
    "list-modules": lambda c: ["list-modules", *MODEL, "--depth", "1"],
    "stats": lambda c: ["stats", c.cap],
    "diff": lambda c: ["diff", c.cap, c.cap],
}
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
SITUATIONS = ("foreign", "read-only", "is-a-file", "reads-from")


def _cases() -> list[tuple[str, int, str, str]]:
    cases = []
    for command in COMMANDS:
        for i, recipe in enumerate(WRITERS.get(command, [])):
            cases += [(command, i, "foreign", name) for name in recipe.names]
            cases += [(command, i, s, "") for s in SITUATIONS[1:]]
        if command not in WRITERS:
            cases.append((command, 0, "reads", ""))
    return cases


def _state(*roots: Path) -> dict[str, str]:
    """Every path under ``roots``: a file's sha256, or ``folder``."""
    found = {}
    for root in roots:
        for path in sorted(root.rglob("*")) if root.is_dir() else [root]:
            found[str(path)] = "folder" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _out_for(command: str, made: Captures, tmp_path: Path) -> Path:
    """The folder the command writes into: a copy of the capture for report, else a new folder."""
    out = tmp_path / "out"
    if command == "report":
        shutil.copytree(made.cap, out)
    return out


@pytest.mark.parametrize(("command", "recipe", "situation", "name"), _cases())
def test_every_writing_command_keeps_the_users_files(
    made: Captures, tmp_path: Path, command: str, recipe: int, situation: str, name: str
) -> None:
    if command not in WRITERS and command not in READERS:
        pytest.fail(f"`hookdump {command}` is new: add it to WRITERS (with what it writes) or READERS")
    if situation == "reads":
        before = _state(made.root)
        proc = forkrun.run(READERS[command](made), cwd=tmp_path)
        assert proc.returncode in (0, 1), proc.stderr  # diff exits 1 on a difference
        assert "Traceback" not in proc.stderr
        assert _state(made.root) == before
        assert not list(tmp_path.iterdir())
        return
    how = WRITERS[command][recipe]
    out = _out_for(command, made, tmp_path)
    if situation == "foreign":
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(USER)
        named = out / name.split("/")[0]  # the file, or the folder it is in (which is not hookdump's)
        expected, words = 2, [f"`{named}", "Move it away"]
    elif situation == "read-only":
        out.mkdir(exist_ok=True)
        out.chmod(0o555)
        expected, words = 2, [f"`{out}`", "not a writable folder"]
    elif situation == "is-a-file":
        shutil.rmtree(out, ignore_errors=True)
        out.write_bytes(USER)
        expected, words = how.is_file_code, [f"`{out}`"]
    else:
        out = how.reads_from(made)
        expected, words = how.same_folder_code, []
    argv = [str(a) for a in how.argv(made, out)]
    before = _state(made.root, tmp_path)
    try:
        if situation == "read-only":
            code, stdout, stderr = run_unprivileged(argv, tmp_path)
        else:
            proc = forkrun.run(argv, cwd=tmp_path)
            code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    finally:
        if out.is_dir():
            out.chmod(0o755)
    assert code == expected, stderr
    assert "Traceback" not in stderr + stdout
    for word in words:
        assert word in stderr, f"{word!r} not in {stderr}"
    after = _state(made.root, tmp_path)
    kept = {path: sha for path, sha in after.items() if path in before}
    assert kept == before, "a file that was there changed"
    if code != 0:
        assert after == before, f"new files: {sorted(set(after) - set(before))}"
    else:  # what it wrote is listed as hookdump's
        assert RECORD in {Path(p).name for p in set(after) - set(before)} or command in ("capture", "merge")
    if situation == "reads-from" and code == 0:  # clean up what it added to the shared capture
        for path in sorted(set(after) - set(before), key=len, reverse=True):
            shutil.rmtree(path) if Path(path).is_dir() else Path(path).unlink()


def test_a_second_run_replaces_its_own_files_and_a_changed_file_is_refused(
    made: Captures, tmp_path: Path
) -> None:
    """hookdump replaces what it wrote (without --overwrite: pictures and reports are made again), but not a
    file of that name that changed since: the record's size and sha256 say so."""
    out = tmp_path / "sheets"
    argv = ["top", made.cap, "-l", "layer1", "--channel", "0", "-k", "2", "--sheets", out]
    for _ in range(2):
        proc = forkrun.run(argv, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    record = json.loads((out / RECORD).read_text())["files"]
    assert set(record) == {"channel-0.png", "top.json"}
    assert record["top.json"]["sha256"] == hashlib.sha256((out / "top.json").read_bytes()).hexdigest()
    (out / "top.json").write_text('{"mine": true}\n')  # the user edits hookdump's file
    proc = forkrun.run(argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "a file hookdump wrote there, changed since" in proc.stderr
    assert (out / "top.json").read_text() == '{"mine": true}\n'


def test_capture_overwrite_takes_its_pictures_and_report_with_it_and_nothing_else(
    made: Captures, tmp_path: Path
) -> None:
    """--overwrite replaces the capture with what hookdump drew from it (its PNGs, its report), and leaves a
    user's picture, even one beside them in the report's folder."""
    out = tmp_path / "cap"
    args = ["capture", *MODEL, "-l", "layer1", made.photos, "--png", "-o", out]
    assert forkrun.run(args, cwd=tmp_path).returncode == 0
    assert forkrun.run(["report", out], cwd=tmp_path).returncode == 0
    drawn = sorted(p.name for p in (out / "report").iterdir())
    assert (out / "index.html").is_file() and (out / "layer1.png").is_file() and drawn
    (out / "mine.png").write_bytes(USER)
    proc = forkrun.run(
        ["capture", *MODEL, "-l", "layer1", made.photos, "-o", out, "--overwrite"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    left = sorted(p.name for p in out.iterdir())
    assert left == ["inputs.parquet", "layer1.npy", "manifest.json", "mine.png"], left
    assert (out / "mine.png").read_bytes() == USER


def test_copied_capture_reports_again(made: Captures, tmp_path: Path) -> None:
    """A capture copied elsewhere (new mtimes, same bytes) is still hookdump's to report again: the record
    checks the sha256 when the time differs."""
    first = tmp_path / "first"
    shutil.copytree(made.cap, first)
    assert forkrun.run(["report", first], cwd=tmp_path).returncode == 0
    second = tmp_path / "second"
    shutil.copytree(first, second)  # copytree keeps times; touch them as `cp -r` would
    for path in second.rglob("*"):
        os.utime(path, (1, 1))
    proc = forkrun.run(["report", second], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
