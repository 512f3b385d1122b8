"""Windowed tensors (Swin's and DaViT's window attention: several rows per image) are recorded as such and
never drawn as images: Swin's are put back in place, checked against the map timm itself rebuilds from them
(``drop_path1`` receives ``window_reverse`` + the rolled-back shift); ``--index`` counts images; DaViT's
(no geometry), ``--reduce`` of windows and Twins' 5-D windowed attention are refused with what they are."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import timm
import torch
from helpers import levels, photo_batch
from PIL import Image

SWIN = "swin_tiny_patch4_window7_224"
SHIFTED = "layers.0.blocks.1"  # the second block of a stage shifts its windows by (3, 3)


def swin_block_maps(photo: Path) -> np.ndarray:
    """``(56, 56, 96)``: what timm's own window_reverse and roll make of the shifted block's window attention
    for ``photo`` (the input of ``drop_path1``), from the model capture builds for --seed 0."""
    torch.manual_seed(0)
    model = timm.create_model(SWIN).eval()
    seen: list[torch.Tensor] = []
    block = model.get_submodule(SHIFTED)
    assert tuple(block.shift_size) == (3, 3)
    handle = block.drop_path1.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    try:
        with torch.no_grad():
            model(photo_batch(model, photo))
    finally:
        handle.remove()
    return seen[0][0].numpy()


def drawn(cli, out: Path, key: str, index: int) -> dict[int, np.ndarray]:
    """The grey levels of channels 0:3 of image ``index`` as ``show`` draws them (56x56 tiles), by channel."""
    result = cli("show", out, "--key", key, "--index", str(index), "--channels", "0:3", "--grey", "--json")
    assert result.exit_code == 0, result.stderr
    meta = json.loads(result.stdout)
    assert "64 windows of 7x7 tokens put back in place, shifted by (3, 3)" in meta["layout"]
    s = meta["tile"][0] // 56
    with Image.open(meta["path"]) as png:
        image = np.asarray(png.convert("L")).astype(float)
    return {
        t["channel"]: image[t["top"] : t["top"] + 56 * s : s, t["left"] : t["left"] + 56 * s : s]
        for t in meta["tiles"]
    }


def test_swin_windows_are_recorded_and_each_image_drawn_in_place(cli, photos: Path, tmp_path: Path) -> None:
    out, key = tmp_path / "out", f"{SHIFTED}.attn"
    result = cli("capture", "-m", SWIN, "-l", key, photos, "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    (entry,) = json.loads((out / "manifest.json").read_text())["tensors"]
    assert entry["shape"] == [3 * 64, 49, 96]
    assert entry["layout"] == "windows"
    assert entry["windows"] == {"per_image": 64, "size": [7, 7], "map": [56, 56], "shift": [3, 3]}
    # images in the capture's order (sorted paths): chelsea, coffee, more/astronaut
    for index, photo in [(0, photos / "chelsea.png"), (2, photos / "more" / "astronaut.png")]:
        want = swin_block_maps(photo)
        tiles = drawn(cli, out, key, index)
        assert sorted(tiles) == [0, 1, 2]
        for k, tile in tiles.items():
            np.testing.assert_allclose(
                tile, levels(want[:, :, k]), atol=1, err_msg=f"image {index} channel {k}"
            )
    # --index counts images, not windows
    result = cli("show", out, "--key", key, "--index", "5", "-o", tmp_path / "x.png")
    assert result.exit_code == 2
    assert "--index 5 is out of range: the tensor holds 3 image(s)." in result.stderr
    assert not (tmp_path / "x.png").exists()
    result = cli("show", out, "--key", key, "--index", "all", "-o", tmp_path / "all")
    assert result.exit_code == 0, result.stderr
    assert len(list((tmp_path / "all").glob("*.png"))) == 3  # one per image, not one per window


def test_reduce_of_windows_is_refused(cli, tmp_path: Path) -> None:
    result = cli(
        "capture", "-m", SWIN, "-l", f"{SHIFTED}.attn", "--sample", "--reduce", "mean", "-o", tmp_path / "r"
    )
    assert result.exit_code == 2
    assert f"`{SHIFTED}.attn` holds 64 rows per image ((64, 49, 96) for one image" in result.stderr
    assert not (tmp_path / "r").exists()


def test_davit_windows_without_geometry_are_refused_saying_why(cli, tmp_path: Path) -> None:
    out = tmp_path / "d"
    result = cli("capture", "-m", "davit_tiny", "-l", "stages.0.blocks.0.0.attn", "--sample", "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    (entry,) = json.loads((out / "manifest.json").read_text())["tensors"]
    assert (entry["layout"], entry["windows"]) == ("windows", {"per_image": 64})
    result = cli("show", out, "-o", tmp_path / "d.png")
    assert result.exit_code == 4
    assert "64 windows per image, shape (64, 49, 96) for 1 image(s)" in result.stderr
    assert "cannot put them back on the image" in result.stderr
    assert not (tmp_path / "d.png").exists()


def test_twins_local_window_attention_is_named_by_rollout(cli, tmp_path: Path) -> None:
    out = tmp_path / "t"
    layers = ("-l", "blocks.0.0.attn", "--attention")
    result = cli("capture", "-m", "twins_svt_small", *layers, "--sample", "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    (attn,) = [e for e in json.loads((out / "manifest.json").read_text())["tensors"] if e["kind"] == "attn"]
    assert attn["shape"] == [1, 64, 2, 49, 49] and attn["layout"] == "attn"  # (N, windows, heads, w*w, w*w)
    result = cli("show", out, "--rollout", "-o", tmp_path / "r.png")
    assert result.exit_code == 4
    assert (
        "attention within local windows, (N, windows, heads, w*w, w*w): 64 windows of 49 tokens"
        in result.stderr
    )
    assert "written by capture --attention" not in result.stderr  # it was: the input contradicted
