"""Exit 0 never hides wrong or lost data: a resumed capture re-checks what it already holds (its inputs'
sha256, its streams' lengths), the final moves survive kill -9, nothing the user owns is replaced, and a
capture of nothing fails. Every case runs the real console script; kills are real SIGKILLs at the points
named by the test seam HOOKDUMP_TEST_KILL_AT (``commit.kill_at``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
from common import SKIMAGE_DATA, inputs_of, paragraph

TINY = ("-m", "test_resnet", "--input-size", "3,64,64", "-l", "layer1", "-l", "fc")
PHOTOS = ["coffee.png", "chelsea.png", "astronaut.png", "rocket.jpg"]
SCRATCH = ".hookdump-partial"


def _photos(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        name = PHOTOS[i % len(PHOTOS)]
        shutil.copy(SKIMAGE_DATA / name, folder / f"img_{i:03d}{Path(name).suffix}")
    return folder


def hd(*args: object, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real console script; ``kill_at``: SIGKILLed there (``HOOKDUMP_TEST_KILL_AT``)."""
    env = {**os.environ, "HOOKDUMP_TEST_KILL_AT": kill_at or ""}
    done = forkrun.run(args, env=env)
    if kill_at is not None:
        assert done.returncode == -signal.SIGKILL, done.stderr
    return done


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and p.name[0] != "."}


def _same_capture(out: Path, whole: Path) -> None:
    """``out`` holds the files ``whole`` (an uninterrupted run) holds, byte for byte, and the same inputs."""
    theirs, ours = _files(whole), _files(out)
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        if name != "manifest.json":
            assert ours[name] == theirs[name], name
    assert inputs_of(out) == inputs_of(whole)
    assert _manifest(out)["complete"] is not False


# --- item 9: an interrupted --shard I/N resumes ----------------------------------------------------------


def test_an_interrupted_shard_resumes_to_the_bytes_of_an_uninterrupted_one(tmp_path: Path) -> None:
    photos = _photos(tmp_path / "p", 16)
    args = ("capture", *TINY, photos, "--batch-size", "2", "--shard", "1/2")
    assert hd(*args, "-o", tmp_path / "whole").returncode == 0
    out = tmp_path / "out"
    hd(*args, "-o", out, kill_at="checkpoint-2")
    done = hd(*args, "-o", out, "--resume")
    assert done.returncode == 0, done.stderr
    assert "resumed after 4 of 8 images" in done.stderr
    _same_capture(out, tmp_path / "whole")


# --- issue 35 item 9: killed before its first batch reached the disk ---------------------------------------


def test_a_capture_killed_before_its_first_batch_starts_again_with_resume_or_without(tmp_path: Path) -> None:
    photos = _photos(tmp_path / "p", 4)
    args = ("capture", *TINY, photos, "--batch-size", "2")
    assert hd(*args, "-o", tmp_path / "whole").returncode == 0
    for how in ("--resume", None):
        out = tmp_path / f"out{how}"
        hd(*args, "-o", out, kill_at="started")
        assert (out / ".hookdump-partial" / "run.json").is_file()  # the run's record, and no batch
        done = hd(*args, "-o", out, *([how] if how else []))
        assert done.returncode == 0, done.stderr
        if how:
            assert "note: --resume: the capture interrupted in" in done.stderr
            assert "had written no batch yet: it starts from the first" in done.stderr
        assert not (out / ".hookdump-partial").exists()
        _same_capture(out, tmp_path / "whole")


# --- item 4: a capture of zero images fails ---------------------------------------------------------------


def _bad_inputs(folder: Path) -> Path:
    folder.mkdir()
    (folder / "text.png").write_text("not an image\n")  # refused by its header, before any work
    (folder / "cut.jpg").write_bytes((SKIMAGE_DATA / "rocket.jpg").read_bytes()[:3000])  # fails to decode
    return folder


def test_a_capture_of_no_image_fails_and_leaves_nothing(tmp_path: Path) -> None:
    bad = _bad_inputs(tmp_path / "bad")
    (tmp_path / "empty.txt").write_text("# nothing yet\n\n")
    cases = [
        ((f"@{tmp_path / 'empty.txt'}",), ("List file", "empty.txt` holds no images", "path a line")),
        ((bad, "--skip-bad"), ("No image to capture", "left out all 2 input(s)", "text.png")),
        ((bad / "cut.jpg", "--skip-bad"), ("No image to capture", "left out all 1 input(s)", "cut.jpg")),
    ]
    for inputs, words in cases:
        out = tmp_path / "out"
        done = hd("capture", *TINY, *inputs, "-o", out)
        assert done.returncode == 4, done.stderr
        paragraph(done.stderr, *words, "Fix" if "skip" in str(inputs) else "Write")
        assert not out.exists()
    # an earlier capture in the folder is left as it was
    earlier = tmp_path / "earlier"
    assert hd("capture", *TINY, "--random-input", "-o", earlier).returncode == 0
    before = _files(earlier)
    done = hd("capture", *TINY, bad / "cut.jpg", "--skip-bad", "-o", earlier, "--overwrite")
    assert done.returncode == 4, done.stderr
    assert _files(earlier) == before and sorted(p.name for p in earlier.iterdir()) == sorted(before)


# --- item 2: a stream shorter than its checkpoint is refused, never padded with zeros ---------------------


def _scratch_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / SCRATCH).iterdir())}


@pytest.fixture(scope="module")
def sixteen(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """16 photos and their uninterrupted capture in batches of 4, made once for the module (a test that
    changes a photo puts it back)."""
    root = tmp_path_factory.mktemp("sixteen")
    photos = _photos(root / "p", 16)
    assert hd("capture", *TINY, photos, "--batch-size", "4", "-o", root / "whole").returncode == 0
    return photos, root / "whole"


def _killed_after_two_batches(
    tmp_path: Path, sixteen: tuple[Path, Path]
) -> tuple[Path, Path, Path, tuple[object, ...]]:
    """The sixteen photos' capture into ``tmp_path/out``, SIGKILLed after its second checkpoint: the photos,
    the uninterrupted capture, the interrupted folder, and the command's arguments but ``-o``."""
    (photos, whole), out = sixteen, tmp_path / "out"
    args = ("capture", *TINY, photos, "--batch-size", "4")
    hd(*args, "-o", out, kill_at="checkpoint-2")
    return photos, whole, out, args


def test_a_stream_cut_short_after_its_checkpoint_is_refused_changing_nothing(
    tmp_path: Path, sixteen: tuple[Path, Path]
) -> None:
    _, whole, out, args = _killed_after_two_batches(tmp_path, sixteen)
    progress = json.loads((out / SCRATCH / "progress.json").read_text())
    state = next(s for s in progress["streams"] if s["key"][0] == "layer1")
    assert state["rows"] == 8
    stream = out / SCRATCH / state["file"]
    row = (stream.stat().st_size - 512) // 8
    os.truncate(stream, 512 + 3 * row + 100)  # what a power cut can leave: the last blocks never written
    before = _scratch_files(out)
    done = hd(*args, "-o", out, "--resume")
    assert done.returncode == 4, done.stderr
    paragraph(done.stderr, "lost data", "counts 8 row(s) of `layer1`", state["file"], "holds 3 of them")
    paragraph(done.stderr, "--overwrite")
    assert _scratch_files(out) == before and not (out / "manifest.json").exists()
    stream.unlink()
    gone = hd(*args, "-o", out, "--resume")
    assert gone.returncode == 4 and "is missing" in paragraph(gone.stderr, "lost data"), gone.stderr
    assert hd(*args, "-o", out, "--overwrite").returncode == 0
    _same_capture(out, whole)


# --- item 1: --resume re-checks the inputs whose rows are on disk ------------------------------------------


def test_resume_refuses_an_input_changed_since_its_rows_were_captured(
    tmp_path: Path, sixteen: tuple[Path, Path]
) -> None:
    photos, whole, out, args = _killed_after_two_batches(tmp_path, sixteen)
    original = (photos / "img_001.png").read_bytes()
    shutil.copy(SKIMAGE_DATA / "astronaut.png", photos / "img_001.png")  # another photo, the same name
    try:
        before = _scratch_files(out)
        done = hd(*args, "-o", out, "--resume")
        assert done.returncode == 4, done.stderr
        paragraph(done.stderr, "img_001.png` changed since the interrupted capture", "sha256", "--overwrite")
        assert _scratch_files(out) == before and not (out / "manifest.json").exists()
    finally:
        (photos / "img_001.png").write_bytes(original)  # put back: the resume goes on, to the same bytes
    assert hd(*args, "-o", out, "--resume").returncode == 0
    _same_capture(out, whole)
    # an input of a batch not yet captured may change: it is read (and hashed) when its batch comes
    photos = shutil.copytree(photos, tmp_path / "p")  # a copy of its own: this photo stays changed
    args = ("capture", *TINY, photos, "--batch-size", "4")
    hd(*args, "-o", tmp_path / "later", kill_at="checkpoint-1")
    shutil.copy(SKIMAGE_DATA / "astronaut.png", photos / "img_012.png")
    assert hd(*args, "-o", tmp_path / "later", "--resume").returncode == 0
    later = next(i for i in inputs_of(tmp_path / "later") if i["path"].endswith("img_012.png"))
    assert later["sha256"] == hashlib.sha256((SKIMAGE_DATA / "astronaut.png").read_bytes()).hexdigest()


def test_resume_checks_the_header_of_each_input_not_yet_captured(
    tmp_path: Path, sixteen: tuple[Path, Path]
) -> None:
    """The inputs already captured are hashed instead of checked (same bytes as when they decoded); every
    other input is still checked before the first batch, as a fresh run checks it."""
    photos, whole, out, args = _killed_after_two_batches(tmp_path, sixteen)
    good = (photos / "img_013.png").read_bytes()
    try:
        (photos / "img_013.png").write_bytes(good[: len(good) // 2])  # cut: its header check fails
        before = _scratch_files(out)
        done = hd(*args, "-o", out, "--resume")
        assert done.returncode == 4, done.stderr
        paragraph(done.stderr, "img_013.png")
        assert _scratch_files(out) == before and not (out / "manifest.json").exists()
    finally:
        (photos / "img_013.png").write_bytes(good)
    assert hd(*args, "-o", out, "--resume").returncode == 0
    _same_capture(out, whole)


# --- item 8: kill -9 inside the final moves -----------------------------------------------------------------

FORMATS = ("--format", "npy,pt,safetensors")


def _hidden(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def eight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """8 photos and their uninterrupted capture in batches of 4, in every format, made once for the
    module: the tests only read both."""
    root = tmp_path_factory.mktemp("eight")
    photos = _photos(root / "p", 8)
    assert hd("capture", *TINY, photos, "--batch-size", "4", *FORMATS, "-o", root / "whole").returncode == 0
    return photos, root / "whole"


def test_a_kill_in_the_final_moves_is_finished_by_resume(tmp_path: Path, eight: tuple[Path, Path]) -> None:
    photos, whole = eight
    args = ("capture", *TINY, photos, "--batch-size", "4", *FORMATS)
    for point in ("commit-staged", "commit-moves"):
        out = tmp_path / point
        hd(*args, "-o", out, kill_at=point)
        assert not (out / "manifest.json").exists()  # nothing presents itself as complete
        again = hd(*args, "-o", out)
        assert again.returncode == 2, again.stderr
        paragraph(again.stderr, "8 of 8 images done, stopped while moving its files into place", "--resume")
        done = hd(*args, "-o", out, "--resume")
        assert done.returncode == 0, done.stderr
        assert "finished moving the files of the capture interrupted" in done.stderr
        assert "wrote 5 file(s) (6 tensors)" in done.stdout, done.stdout
        _same_capture(out, whole)
        assert _hidden(out) == []


def test_a_killed_overwrite_keeps_the_old_capture_until_the_new_one_is_whole(
    tmp_path: Path, eight: tuple[Path, Path]
) -> None:
    photos, whole = eight
    new = ("capture", *TINY, photos, "--batch-size", "4", *FORMATS)
    old = ("capture", "-m", "test_resnet", "-l", "layer2", "--random-input", "--format", "npy,pt")
    assert hd(*old, "-o", tmp_path / "old").returncode == 0
    for point in ("commit-staged", "commit-moves"):
        out = tmp_path / point
        shutil.copytree(tmp_path / "old", out)  # the old capture, as that run left it
        before = _files(out)
        hd(*new, "-o", out, "--overwrite", kill_at=point)
        if point == "commit-staged":  # nothing of the old capture touched yet
            assert _files(out) == before
        done = hd(*new, "-o", out, "--resume")
        assert done.returncode == 0, done.stderr
        _same_capture(out, whole)  # the old files gone (layer2.*), the new ones whole
        assert _hidden(out) == []
    # --overwrite after such a kill finishes the moves first, then replaces that capture
    out = tmp_path / "again"
    hd(*new, "-o", out, kill_at="commit-moves")
    redo = hd(*old, "-o", out, "--overwrite")
    assert redo.returncode == 0, redo.stderr
    assert sorted(_files(out)) == sorted(_files(tmp_path / "old")) and _hidden(out) == []


def test_a_kill_after_the_manifest_leaves_a_finished_capture_that_the_next_run_tidies(
    tmp_path: Path, eight: tuple[Path, Path]
) -> None:
    (photos, whole), out = eight, tmp_path / "out"
    args = ("capture", *TINY, photos, "--batch-size", "4", *FORMATS)
    hd(*args, "-o", out, kill_at="commit-done")
    assert _hidden(out) == [".hookdump-partial", ".hookdump.lock"]  # what the kill leaves
    stats = hd("stats", out)
    assert stats.returncode == 0, stats.stderr  # a finished capture, read as one
    again = hd(*args, "-o", out)
    assert again.returncode == 2 and "already holds a capture" in paragraph(again.stderr), again.stderr
    assert _hidden(out) == []  # tidied by that run, silently
    _same_capture(out, whole)


# --- item 3: hookdump replaces only what its own manifest lists ---------------------------------------------


def test_a_users_own_file_in_the_way_is_refused_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    np.save(out / "layer1.npy", np.arange(3))
    shutil.copy(SKIMAGE_DATA / "coffee.png", out / "coffee.png")  # not in the way of anything: stays allowed
    mine = _files(out)
    for extra in ((), ("--overwrite",)):
        done = hd("capture", *TINY, "--random-input", "-o", out, *extra)
        assert done.returncode == 2, done.stderr
        paragraph(done.stderr, f"`{out / 'layer1.npy'}` is in the way", "no hookdump record", "Move it")
        assert _files(out) == mine and _hidden(out) == []
    (out / "layer1.npy").unlink()
    assert hd("capture", *TINY, "--random-input", "-o", out).returncode == 0  # beside the photo
    assert (out / "coffee.png").read_bytes() == mine["coffee.png"]
    # a finished capture's own files are replaced by --overwrite; a file it does not list is not
    (out / "layer1.out0.npy").write_bytes(b"mine")
    (out / "fc@1.pt").write_bytes(b"mine too")
    for name in ("fc@1.pt", "layer1.out0.npy"):
        done = hd("capture", *TINY, "--random-input", "-o", out, "--overwrite", "--format", "npy,pt")
        assert done.returncode == 2 and f"{name}` is in the way" in paragraph(done.stderr), done.stderr
        assert (out / name).read_bytes().startswith(b"mine")
        (out / name).unlink()
    assert hd("capture", *TINY, "--random-input", "-o", out, "--overwrite").returncode == 0
    (out / "tensors.safetensors").write_bytes(b"someone's")
    done = hd("capture", *TINY, "--random-input", "-o", out, "--overwrite", "--format", "safetensors")
    assert done.returncode == 2, done.stderr
    paragraph(done.stderr, "tensors.safetensors` is in the way")
    assert (out / "tensors.safetensors").read_bytes() == b"someone's"


def test_a_manifest_that_is_not_hookdumps_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "data"
    out.mkdir()
    for text in ('{"name": "my dataset"}\n', "{not json at all\n", "[1, 2]\n"):
        (out / "manifest.json").write_text(text)
        for extra in ((), ("--overwrite",), ("--resume",)):
            done = hd("capture", *TINY, "--random-input", "-o", out, *extra)
            assert done.returncode == 2, done.stderr
            paragraph(done.stderr, "manifest.json` is not a hookdump manifest", "Move it away")
            assert (out / "manifest.json").read_text() == text
            assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]
