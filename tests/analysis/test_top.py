"""`hookdump top`: each channel's top inputs over a real dataset-style capture (a seeded resnet18, ten real
photos, safetensors in shards) made by the console script, checked against ``numpy.argsort`` on the whole
tensor; the contact sheets are real PNGs; one streamed pass in bounded memory."""

from __future__ import annotations

import json
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import forkrun
import numpy as np
import pytest
from common import SKIMAGE_DATA
from PIL import Image
from safetensors.numpy import load_file

from hookdump.analysis.top import top

PHOTOS = ("chelsea", "coffee", "astronaut", "camera", "brick", "coins", "grass", "horse", "moon", "page")


def hd(*args: object) -> subprocess.CompletedProcess[str]:
    """The console script, forked from a server that imported it once (``forkrun``)."""
    return forkrun.run(args, timeout=600)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("top")
    photos = root / "photos"
    photos.mkdir()
    for name in PHOTOS:
        shutil.copy(SKIMAGE_DATA / f"{name}.png", photos / f"{name}.png")
    out = root / "feats"
    done = hd(
        "capture", "-m", "resnet18", "-l", "layer1", "-l", "layer3", photos, "--input-size", "3,64,64",
        "--format", "safetensors", "--shard-size", "200KB", "--batch-size", "4", "-o", out, "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(list(out.glob("tensors-*-of-*.safetensors"))) > 1  # in shards, as a dataset capture
    return out


def _whole(out: Path, name: str) -> np.ndarray:
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(out.glob("tensors-*.safetensors")):
        tensors |= load_file(str(shard))
    return tensors[name].astype(np.float64)


@pytest.mark.parametrize(("by", "k"), [("max", 3), ("mean", 9), ("max", 20)])
def test_top_k_is_numpys_argsort_on_the_whole_tensor(dataset: Path, by: str, k: int) -> None:
    done = hd(
        "top", dataset, "--layer", "layer3", "--channels", "0:256", "-k", k, "--by", by, "--no-png", "--json"
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    whole = _whole(dataset, "layer3")
    scores = whole.max(axis=(2, 3)) if by == "max" else whole.mean(axis=(2, 3))
    assert [c["channel"] for c in found["channels"]] == list(range(256))
    for c in found["channels"]:
        want = np.argsort(-scores[:, c["channel"]], kind="stable")[:k]
        assert [t["index"] for t in c["top"]] == want.tolist()
        assert [t["value"] for t in c["top"]] == pytest.approx(scores[want, c["channel"]].tolist(), rel=1e-6)
        assert [Path(t["input"]).stem for t in c["top"]] == [sorted(PHOTOS)[i] for i in want]
    if k > len(PHOTOS):
        assert f"note: -k {k}: the capture holds 10 inputs" in done.stderr


def test_contact_sheets_one_per_channel(dataset: Path, tmp_path: Path) -> None:
    done = hd("top", dataset, "--layer", "layer1", "--channel", "7", "-k", "4", "--sheets", tmp_path / "s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"top 4 inputs by the max of each channel of layer1 in {dataset}:"
    sheet = tmp_path / "s" / "channel-7.png"
    assert f"-> {sheet}" in done.stdout and sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        ".hookdump-files.json",
        sheet.name,
        "top.json",
    ]  # fmt: skip (the first: the record that says hookdump wrote the others)
    kept = json.loads((tmp_path / "s" / "top.json").read_text())  # what --json prints, for `hookdump report`
    assert kept["hookdump_result"] == "top" and kept["record"] == str(tmp_path / "s" / "top.json")
    assert [c["channel"] for c in kept["channels"]] == [7] and kept["channels"][0]["png"] == str(sheet)
    assert done.stdout.splitlines()[-1] == f"wrote {tmp_path / 's' / 'top.json'}"
    with Image.open(sheet) as picture:
        assert picture.format == "PNG" and picture.width >= 2 * 128 and picture.height >= 2 * 128
    default = hd("top", dataset, "--layer", "layer1", "-k", "2", "--json")
    pngs = [c["png"] for c in json.loads(default.stdout)["channels"]]
    assert len(pngs) == 16 and all(Path(p).is_file() for p in pngs)  # the first 16, under OUT/top/layer1
    assert Path(pngs[0]) == dataset / "top" / "layer1" / "channel-0.png"


def test_one_streamed_pass_in_bounded_memory(dataset: Path) -> None:
    whole = _whole(dataset, "layer1")  # (10, 64, 16, 16)
    import pyarrow.parquet  # noqa: F401  (the inputs' table's reader, imported first: the bound is the stream's)

    tracemalloc.start()
    found = top(dataset, "layer1", channels="0:64", k=3, png=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < whole.nbytes / 2, (peak, whole.nbytes)
    scores = whole.max(axis=(2, 3))
    assert [c.inputs[0]["index"] for c in found.channels] == scores.argmax(axis=0).tolist()


def test_what_top_refuses(cli, dataset: Path) -> None:
    wrong = cli("top", dataset, "--layer", "layr3")
    assert (
        wrong.exit_code == 2
        and "No tensor `layr3`" in wrong.stderr
        and "Did you mean: layer3" in wrong.stderr
    )
    out_of_range = cli("top", dataset, "--layer", "layer1", "--channel", "64")
    assert out_of_range.exit_code == 2 and "outside the 64 channels" in out_of_range.stderr
    both = cli("top", dataset, "--layer", "layer1", "--channel", "1", "--channels", "0:2")
    assert both.exit_code == 2 and "both given" in both.stderr


def test_a_reduced_capture_is_ranked_by_its_values(dataset: Path, tmp_path: Path) -> None:
    """``--reduce mean`` keeps one value per channel: top ranks the inputs by it, as numpy ranks the
    full capture's maps averaged over space (the same seeded model, the same photos); logits (N, 1000) too."""
    reduced = tmp_path / "reduced"
    done = hd(
        "capture", "-m", "resnet18", "-l", "layer3", "-l", "fc", dataset.parent / "photos", "--input-size",
        "3,64,64", "--reduce", "mean", "--batch-size", "4", "-o", reduced, "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ranked = hd("top", reduced, "--layer", "layer3", "--channels", "0:256", "-k", "3", "--no-png", "--json")
    assert ranked.returncode == 0, ranked.stderr
    assert "layer3 holds one value per channel per input (--reduce mean at capture)" in ranked.stderr
    found = json.loads(ranked.stdout)
    assert found["by"] == "value" and [c["channel"] for c in found["channels"]] == list(range(256))
    scores = _whole(dataset, "layer3").mean(axis=(2, 3))  # the full maps, averaged here
    for c in found["channels"]:
        want = np.argsort(-scores[:, c["channel"]], kind="stable")[:3]
        assert [t["index"] for t in c["top"]] == want.tolist(), c["channel"]
        assert [t["value"] for t in c["top"]] == pytest.approx(scores[want, c["channel"]].tolist(), rel=1e-4)
    logits = np.load(reduced / "fc.npy")
    sheet = hd("top", reduced, "--layer", "fc", "--channel", "281", "-k", "4", "--sheets", tmp_path / "s")
    assert sheet.returncode == 0, sheet.stderr
    assert "fc holds one value per channel per input" in sheet.stderr
    assert sheet.stdout.splitlines()[0] == f"top 4 inputs by the value of each channel of fc in {reduced}:"
    kept = json.loads((tmp_path / "s" / "top.json").read_text())["channels"][0]["top"]
    assert [t["index"] for t in kept] == np.argsort(-logits[:, 281], kind="stable")[:4].tolist()
    with Image.open(tmp_path / "s" / "channel-281.png") as picture:  # the photos, without a map over them
        assert picture.format == "PNG" and picture.width >= 2 * 128 and picture.height >= 2 * 128


def test_a_tile_without_a_map_is_the_photo_or_grey(tmp_path: Path) -> None:
    from hookdump.pictures.contact import tile

    grey = tile(None, tmp_path / "gone.png", None)  # the photo moved away since the capture
    assert grey.shape == (128, 128, 3) and (grey == 128).all()
    photo = tile(None, SKIMAGE_DATA / "chelsea.png", None)
    with Image.open(SKIMAGE_DATA / "chelsea.png") as opened:  # 451x300: its long side to the tile's
        assert photo.shape == (300 * max(128, 451) // 451, max(128, 451), 3)
        assert abs(photo.astype(float).mean() - np.asarray(opened.convert("RGB"), float).mean()) < 2
