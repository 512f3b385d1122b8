"""Issue 38, its first part: inputs straight from webdataset tar shards and class folders, built here from
scikit-image's photos. Each capture is checked against the capture of the same photos as loose files,
bitwise; labels and keys against what the shards hold; bad shards against their one-paragraph errors."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from common import SKIMAGE_DATA, inputs_of, paragraph
from dataset_inputs import MODEL, PHOTOS, hd


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 shards of 2 samples (``n{shard}_{i}``: the photo, its ``.cls`` = the shard, a ``.json``), in
    webdataset's layout, and the same photos as loose files in the same order; the loose files' capture."""
    root = tmp_path_factory.mktemp("shards")
    (root / "loose").mkdir()
    for s in range(3):
        with tarfile.open(root / f"train-{s:03d}.tar", "w") as tar:
            for i in range(2):
                name = PHOTOS[2 * s + i]
                data = (SKIMAGE_DATA / name).read_bytes()
                key = f"n{s}_{i}"
                _add(tar, f"{key}.{name.split('.')[1]}", data)
                _add(tar, f"{key}.cls", str(s).encode())
                _add(tar, f"{key}.json", json.dumps({"photo": name}).encode())
                shutil.copy(SKIMAGE_DATA / name, root / "loose" / f"{s}{i}-{name}")
    done = hd(root, "capture", *MODEL, "loose", "--batch-size", "2", "-o", "files")
    assert done.returncode == 0, done.stderr
    return root


def test_a_brace_range_of_shards_is_the_capture_of_the_same_photos_as_files(
    dataset: Path, tmp_path: Path
) -> None:
    """Same rows, same order, same bytes; each input named SHARD::KEY with its label and metadata."""
    shards = str(dataset / "train-{000..002}.tar")
    done = hd(tmp_path, "capture", *MODEL, shards, "--batch-size", "2", "--workers", "2", "-o", "tar")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tar" / "layer1.npy").read_bytes() == (dataset / "files" / "layer1.npy").read_bytes()
    inputs = inputs_of(tmp_path / "tar")
    files = inputs_of(dataset / "files")
    assert [r["path"] for r in inputs] == [
        f"{dataset}/train-{s:03d}.tar::n{s}_{i}" for s in range(3) for i in range(2)
    ]
    assert [r["sha256"] for r in inputs] == [r["sha256"] for r in files]  # the image member's own bytes
    assert [r["label"] for r in inputs] == [0, 0, 1, 1, 2, 2]
    assert [r["metadata"]["json"]["photo"] for r in inputs] == PHOTOS
    assert "labels: 6 input(s) have one (3 distinct: 0, 1, 2)" in done.stderr
    listing = tmp_path / "shards.txt"
    listing.write_text("\n".join(str(dataset / f"train-{s:03d}.tar") for s in range(3)) + "\n")
    for given in (f"@{listing}", str(dataset / "train-*.tar")):
        done = hd(tmp_path, "capture", *MODEL, given, "--batch-size", "2", "-o", "again", "--overwrite")
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "again" / "layer1.npy").read_bytes() == (
            tmp_path / "tar" / "layer1.npy"
        ).read_bytes()


def test_image_key_chooses_the_member(tmp_path: Path) -> None:
    """A sample with a .jpg and a .png: the .jpg by default (first of jpg, jpeg, png, webp), the .png with
    --image-key png; the values are those of the chosen photo as a file."""
    with tarfile.open(tmp_path / "two.tar", "w") as tar:
        _add(tar, "a.jpg", (SKIMAGE_DATA / "rocket.jpg").read_bytes())
        _add(tar, "a.png", (SKIMAGE_DATA / "chelsea.png").read_bytes())
    for key, photo in ((None, "rocket.jpg"), ("png", "chelsea.png")):
        option = ("--image-key", key) if key else ()
        assert hd(tmp_path, "capture", *MODEL, "two.tar", *option, "-o", f"t{key}").returncode == 0
        assert hd(tmp_path, "capture", *MODEL, SKIMAGE_DATA / photo, "-o", f"f{key}").returncode == 0
        assert (tmp_path / f"t{key}" / "layer1.npy").read_bytes() == (
            tmp_path / f"f{key}" / "layer1.npy"
        ).read_bytes()
    manifest = json.loads((tmp_path / "tpng" / "manifest.json").read_text())
    assert manifest["options"]["image_key"] == "png"


def test_bad_shards_are_one_paragraph_each_and_skip_bad_names_the_sample(
    dataset: Path, tmp_path: Path
) -> None:
    whole = (dataset / "train-000.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(whole[: len(whole) // 3])
    (tmp_path / "zero.tar").write_bytes(b"\0" * 10)
    tarfile.open(tmp_path / "empty.tar", "w").close()
    with tarfile.open(tmp_path / "bad.tar", "w") as tar:
        _add(tar, "text.jpg", b"not an image at all")
        _add(tar, "label.cls", b"3")
        _add(tar, "good.png", (SKIMAGE_DATA / "coffee.png").read_bytes())
    cases = [
        ("cut.tar", ["Shard `cut.tar` is cut short: its member", "ends past the end of the file"]),
        ("zero.tar", ["Shard `zero.tar` is not a tar file hookdump can read"]),
        ("empty.tar", ["Shard `empty.tar` holds no sample (an empty tar)"]),
        (str(dataset / "train-{000..004}.tar"), ["train-003.tar` (of the 5", "does not exist"]),
        ("bad.tar", ["Input `bad.tar::text` is not an image: its image bytes are no format Pillow reads"]),
    ]
    for given, words in cases:
        done = hd(tmp_path, "capture", *MODEL, given, "-o", "x")
        assert done.returncode == 4, (given, done.stderr)
        text = paragraph(done.stderr, *words)
        assert "0x" not in text  # no in-memory object's address
        assert not (tmp_path / "x").exists()
    done = hd(tmp_path, "capture", *MODEL, "bad.tar", "--image-key", "webp", "-o", "x")
    assert done.returncode == 4
    paragraph(done.stderr, "`bad.tar::text` has no image: its members are .jpg", ".webp member (--image-key)")
    done = hd(tmp_path, "capture", *MODEL, "bad.tar", "--skip-bad", "-o", "skipped")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "skipped" / "manifest.json").read_text())
    assert [r["path"] for r in inputs_of(tmp_path / "skipped")] == ["bad.tar::good"]
    assert [s["path"] for s in manifest["skipped"]] == ["bad.tar::text", "bad.tar::label"]
    assert "has no image: its members are .cls" in manifest["skipped"][1]["reason"]


def test_killed_mid_shard_resume_and_whole_shard_parts(dataset: Path, tmp_path: Path) -> None:
    """kill -9 after the first batch (mid-shard: batches of one), then --resume: the bytes of the loose
    files' capture; --shard 0/2 and 1/2 take whole shards (the manifest says so) and merge to them too."""
    shards = str(dataset / "train-{000..002}.tar")
    args = ("capture", *MODEL, shards, "--batch-size", "1", "--workers", "0")
    killed = hd(tmp_path, *args, "-o", "out", env={**os.environ, "HOOKDUMP_TEST_KILL_AT": "checkpoint-1"})
    assert killed.returncode == -9, killed.stderr
    done = hd(tmp_path, *args, "-o", "out", "--resume")
    assert done.returncode == 0 and "resumed after 1 of 6" in done.stderr, done.stderr
    reference = (dataset / "files" / "layer1.npy").read_bytes()
    assert (tmp_path / "out" / "layer1.npy").read_bytes() == reference
    parts = []
    for i in range(2):
        assert hd(tmp_path, *args, "--shard", f"{i}/2", "-o", f"part{i}").returncode == 0
        parts.append(json.loads((tmp_path / f"part{i}" / "manifest.json").read_text()))
    assert [p["shard"]["split"] for p in parts] == ["tar shards"] * 2
    assert [[r["path"].split("::")[0][-13:] for r in inputs_of(tmp_path / f"part{i}")] for i in range(2)] == [
        ["train-000.tar"] * 2,
        ["train-001.tar"] * 2 + ["train-002.tar"] * 2,
    ]
    assert hd(tmp_path, "merge", "part0", "part1", "-o", "merged").returncode == 0
    assert (tmp_path / "merged" / "layer1.npy").read_bytes() == reference


def test_readers_show_the_samples_photos(dataset: Path, tmp_path: Path) -> None:
    """report's thumbnails, capture --png's overlay and top's sheets read each sample's image in its shard."""
    shards = str(dataset / "train-{000..002}.tar")
    done = hd(tmp_path, "capture", *MODEL, shards, "--png", "-o", "cap")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cap" / "layer1.overlay.png").is_file()
    assert hd(tmp_path, "report", "cap").returncode == 0
    assert sorted(p.name for p in (tmp_path / "cap" / "report" / "inputs").iterdir())[:2] == [
        "0.jpg",
        "1.jpg",
    ]
    assert "not found" not in (tmp_path / "cap" / "index.html").read_text()
    done = hd(tmp_path, "top", "cap", "-l", "layer1", "--sheets", "sheets", "--json")
    assert done.returncode == 0, done.stderr
    assert "::n" in done.stdout


def test_class_folders_label_each_input(tmp_path: Path) -> None:
    """ImageFolder's layout: the first subfolder of the folder given is each image's label; a folder that
    holds images of its own is no class folder (no label)."""
    for label, names in (("cat", ["chelsea.png"]), ("things", ["coffee.png", "rocket.jpg"])):
        (tmp_path / "val" / label).mkdir(parents=True)
        for name in names:
            shutil.copy(SKIMAGE_DATA / name, tmp_path / "val" / label / name)
    done = hd(tmp_path, "capture", *MODEL, "val", "-o", "cap")
    assert done.returncode == 0, done.stderr
    inputs = inputs_of(tmp_path / "cap")
    assert [(Path(r["path"]).name, r["label"]) for r in inputs] == [
        ("chelsea.png", "cat"),
        ("coffee.png", "things"),
        ("rocket.jpg", "things"),
    ]
    shutil.copy(SKIMAGE_DATA / "camera.png", tmp_path / "val" / "loose.png")
    done = hd(tmp_path, "capture", *MODEL, "val", "-o", "mixed")
    assert done.returncode == 0, done.stderr
    inputs = inputs_of(tmp_path / "mixed")
    assert not any("label" in r for r in inputs)
    values = np.load(tmp_path / "cap" / "layer1.npy")
    assert values.shape[0] == 3
