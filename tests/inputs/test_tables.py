"""Issue 38, its second part: Parquet files and Hugging Face ``datasets`` folders (``save_to_disk``) as
inputs, built here from scikit-image's photos with pyarrow and datasets: the capture equals the capture of
the same photos as files, bitwise; labels come from --label-column; bad tables get one paragraph each."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from common import SKIMAGE_DATA, inputs_of, paragraph
from dataset_inputs import MODEL, PHOTOS, hd

import hookdump


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The photos as files (and their capture), as a Parquet file of two row groups with a label column, and
    as a save_to_disk folder of datasets.Image structs."""
    import datasets

    root = tmp_path_factory.mktemp("tables")
    (root / "loose").mkdir()
    for i, name in enumerate(PHOTOS):
        shutil.copy(SKIMAGE_DATA / name, root / "loose" / f"{i}-{name}")
    table = pa.table(
        {"img": [(SKIMAGE_DATA / n).read_bytes() for n in PHOTOS], "cls": list(range(6)), "name": PHOTOS}
    )
    pq.write_table(table, root / "photos.parquet", row_group_size=4)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    dataset = datasets.Dataset.from_dict(
        {"image": [str(SKIMAGE_DATA / n) for n in PHOTOS], "label": [10 + i for i in range(6)]},
        features=features,
    )
    dataset.save_to_disk(str(root / "hf"))
    done = hd(root, "capture", *MODEL, "loose", "--batch-size", "4", "-o", "files")
    assert done.returncode == 0, done.stderr
    return root


def test_parquet_rows_are_the_capture_of_the_same_photos(data: Path, tmp_path: Path) -> None:
    args = ("capture", *MODEL, data / "photos.parquet", "--image-column", "img", "--label-column", "cls")
    done = hd(tmp_path, *args, "--batch-size", "4", "--workers", "2", "-o", "pq")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pq" / "layer1.npy").read_bytes() == (data / "files" / "layer1.npy").read_bytes()
    inputs = inputs_of(tmp_path / "pq")
    assert [r["path"] for r in inputs] == [f"{data}/photos.parquet::{i}" for i in range(6)]
    assert [r["label"] for r in inputs] == list(range(6))
    files = inputs_of(data / "files")
    assert [r["sha256"] for r in inputs] == [r["sha256"] for r in files]


def test_an_at_list_line_naming_a_parquet_file_gives_its_rows(data: Path, tmp_path: Path) -> None:
    """A table named in an ``@list`` file is expanded to its rows there too, as a tar shard's line is."""
    (tmp_path / "list.txt").write_text(f"{data / 'photos.parquet'}\n")
    args = ("capture", *MODEL, "@list.txt", "--image-column", "img", "--batch-size", "4", "-o", "listed")
    done = hd(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "listed" / "layer1.npy").read_bytes() == (data / "files" / "layer1.npy").read_bytes()
    assert [r["path"] for r in inputs_of(tmp_path / "listed")] == [
        f"{data}/photos.parquet::{i}" for i in range(6)
    ]


def test_a_save_to_disk_folder_is_read_by_its_image_struct(data: Path, tmp_path: Path) -> None:
    done = hd(
        tmp_path, "capture", *MODEL, data / "hf", "--label-column", "label", "--batch-size", "4", "-o", "hf"
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "hf" / "layer1.npy").read_bytes() == (data / "files" / "layer1.npy").read_bytes()
    inputs = inputs_of(tmp_path / "hf")
    assert [r["label"] for r in inputs] == [10 + i for i in range(6)]
    assert inputs[0]["path"].endswith(".arrow::0")


def test_killed_mid_table_resume_gives_the_same_bytes(data: Path, tmp_path: Path) -> None:
    args = (
        "capture",
        *MODEL,
        data / "photos.parquet",
        "--image-column",
        "img",
        "--batch-size",
        "2",
        "--workers",
        "0",
    )
    assert hd(tmp_path, *args, "-o", "whole").returncode == 0
    whole = pq.read_table(tmp_path / "whole" / "inputs.parquet").to_pylist()
    assert [r["sha256"] for r in whole] == [r["sha256"] for r in inputs_of(data / "files")]
    for out, journal in (("out", "records"), ("old", "sha256 pairs")):
        kill = {**os.environ, "HOOKDUMP_TEST_KILL_AT": "checkpoint-2"}
        killed = hd(tmp_path, *args, "-o", out, env=kill)
        assert killed.returncode == -9, killed.stderr
        lines = tmp_path / out / ".hookdump-partial" / "inputs.jsonl"
        batches = [json.loads(line) for line in lines.read_text().splitlines()]
        assert [len(b) for b in batches] == [2, 2] and batches[0][0]["mode"] == "RGB"
        if journal == "sha256 pairs":  # as hookdump kept them before the inputs' table
            lines.write_text(
                "".join(json.dumps([[r["path"], r["sha256"]] for r in b]) + "\n" for b in batches)
            )
        done = hd(tmp_path, *args, "-o", out, "--resume")
        assert done.returncode == 0 and "resumed after 4 of 6" in done.stderr, done.stderr
        assert (tmp_path / out / "layer1.npy").read_bytes() == (data / "files" / "layer1.npy").read_bytes()
        assert pq.read_table(tmp_path / out / "inputs.parquet").to_pylist() == whole, journal


def test_a_resumed_table_keeps_an_input_given_twice(data: Path, tmp_path: Path) -> None:
    """The table written again on --resume comes from the journal row by row, not by path: an input named
    twice keeps both rows."""
    photo = str(data / "loose" / f"0-{PHOTOS[0]}")
    args = ("capture", *MODEL, photo, photo, photo, photo, "--batch-size", "2", "--workers", "0")
    killed = hd(tmp_path, *args, "-o", "out", env={**os.environ, "HOOKDUMP_TEST_KILL_AT": "checkpoint-1"})
    assert killed.returncode == -9, killed.stderr
    done = hd(tmp_path, *args, "-o", "out", "--resume")
    assert done.returncode == 0 and "resumed after 2 of 4" in done.stderr, done.stderr
    rows = pq.ParquetFile(tmp_path / "out" / "inputs.parquet").read().to_pylist()
    assert [(r["row"], r["source"]) for r in rows] == [(i, photo) for i in range(4)]


def test_bad_tables_are_one_paragraph_each(data: Path, tmp_path: Path) -> None:
    pq.write_table(pa.table({"caption": ["a cat", "a cup"], "n": [1, 2]}), tmp_path / "text.parquet")
    pq.write_table(
        pa.table({"image": [b"not an image", (SKIMAGE_DATA / "coffee.png").read_bytes()]}),
        tmp_path / "bad.parquet",
    )
    (tmp_path / "cut.parquet").write_bytes((data / "photos.parquet").read_bytes()[:5000])
    cases = [
        (
            ("text.parquet",),
            ["has no column named `image` and 0 binary columns", "caption (string), n (int64)"],
        ),
        (("text.parquet", "--image-column", "caption"), ["Column `caption` of `text.parquet` holds string"]),
        (
            ("text.parquet", "--image-column", "photo"),
            ["has no column `photo`; its columns: caption (string)"],
        ),
        (
            (data / "photos.parquet", "--label-column", "y"),
            ["has no column `y` (--label-column)", "img, cls, name"],
        ),
        (("cut.parquet",), ["`cut.parquet` is not a Parquet file hookdump can read"]),
        (("bad.parquet",), ["`bad.parquet::0` is not an image"]),
    ]
    for given, words in cases:
        done = hd(tmp_path, "capture", *MODEL, *given, "-o", "x")
        assert done.returncode == 4, (given, done.stderr)
        paragraph(done.stderr, *words)
        assert not (tmp_path / "x").exists()
    done = hd(tmp_path, "capture", *MODEL, "bad.parquet", "--skip-bad", "-o", "skipped")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "skipped" / "manifest.json").read_text())
    assert [r["path"] for r in inputs_of(tmp_path / "skipped")] == ["bad.parquet::1"]
    assert [s["path"] for s in manifest["skipped"]] == ["bad.parquet::0"]


def test_without_pyarrow_a_table_is_one_paragraph_naming_the_extra(data: Path, tmp_path: Path) -> None:
    """The console script where pyarrow cannot be imported (a package of that name that refuses to load,
    first on PYTHONPATH): exit 4, the data extra named, nothing written; image files still work."""
    blocked = tmp_path / "blocked" / "pyarrow"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('pyarrow is blocked for this test')\n")
    exe = shutil.which("hookdump", path=str(Path(sys.executable).parent))
    env = {**os.environ, "PYTHONPATH": str(blocked.parent)}
    done = subprocess.run(
        [exe, "capture", *MODEL, str(data / "photos.parquet"), "-o", "x"], capture_output=True, text=True,
        cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    paragraph(
        done.stderr, "Parquet and datasets inputs need the `pyarrow` package", "pip install -e '.[data]'"
    )
    assert not (tmp_path / "x").exists()
    done = subprocess.run(
        [exe, "capture", *MODEL, str(SKIMAGE_DATA / "coffee.png"), "-o", "y"], capture_output=True, text=True,
        cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "the inputs' records are in the manifest: pyarrow (the data extra) would write" in done.stderr
    manifest = json.loads((tmp_path / "y" / "manifest.json").read_text())  # as captures before the table
    assert [Path(r["path"]).name for r in manifest["inputs"]] == ["coffee.png"]
    assert not (tmp_path / "y" / "inputs.parquet").exists()
    assert [Path(r["path"]).name for r in inputs_of(tmp_path / "y")] == ["coffee.png"]  # and it opens


def test_the_inputs_table_beside_the_tensors(data: Path, tmp_path: Path) -> None:
    """The inputs' records leave the manifest for inputs.parquet (read here with pyarrow alone): one row an
    input, source and key apart, labels, sha256 (hashlib's), size and mode; the manifest keeps the count and
    the table's sha256; merge joins the parts' tables; hookdump.open gives it pandas-ready."""
    import hashlib

    shards = tmp_path / "train.tar"
    with tarfile.open(shards, "w") as tar:
        for i, name in enumerate(PHOTOS[:4]):
            for member, body in (
                (f"k{i}.png", (SKIMAGE_DATA / name).read_bytes()),
                (f"k{i}.cls", str(i % 2).encode()),
            ):
                info = tarfile.TarInfo(member)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    args = ("capture", *MODEL, "train.tar", "--batch-size", "2", "--workers", "0")
    assert hd(tmp_path, *args, "-o", "whole").returncode == 0
    manifest = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    table_file = tmp_path / "whole" / "inputs.parquet"
    assert manifest["inputs"] == {
        "count": 4,
        "table": "inputs.parquet",
        "sha256": hashlib.sha256(table_file.read_bytes()).hexdigest(),
    }
    rows = pq.read_table(table_file).to_pylist()
    assert [(r["row"], r["source"], r["key"], r["label"]) for r in rows] == [
        (i, "train.tar", f"k{i}", i % 2) for i in range(4)
    ]
    assert [r["sha256"] for r in rows] == [
        hashlib.sha256((SKIMAGE_DATA / n).read_bytes()).hexdigest() for n in PHOTOS[:4]
    ]
    assert (rows[0]["width"], rows[0]["height"], rows[0]["mode"]) == (451, 300, "RGB")
    frame = hookdump.open(tmp_path / "whole").inputs_table.to_pandas()
    assert frame.groupby("label").size().to_dict() == {0: 2, 1: 2}
    for i in range(2):
        assert hd(tmp_path, *args, "--shard", f"{i}/2", "-o", f"part{i}").returncode == 0
    assert hd(tmp_path, "merge", "part0", "part1", "-o", "merged").returncode == 0
    assert pq.read_table(tmp_path / "merged" / "inputs.parquet").to_pylist() == rows
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "inputs.parquet").write_text("mine")
    done = hd(tmp_path, *args, "-o", "other")
    assert done.returncode == 2 and "`other/inputs.parquet` is in the way" in done.stderr, done.stderr
    assert (tmp_path / "other" / "inputs.parquet").read_text() == "mine"
