"""capture --png: each tensor's grid beside it, and its heat map over the photo; --overwrite removes the
pictures and the report page drawn from the capture it replaces."""

from __future__ import annotations

from pathlib import Path

from PIL import Image


def test_png_draws_every_map_beside_its_tensor_and_says_what_it_skipped(cli, chelsea: Path, tmp_path) -> None:
    out = tmp_path / "out"
    args = ("capture", chelsea, "-m", "resnet18", "-l", "layer1", "-l", "fc", "--input-size", "3,112,112")
    result = cli(*args, "--png", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "drew 2 PNG(s) beside them (--png)" in result.stdout
    assert "fc: skipped" in result.stderr and "vector per image" in result.stderr
    with Image.open(out / "layer1.png") as grid, Image.open(out / "layer1.overlay.png") as heat:
        assert grid.width == 8 * (56 + 2) + 2  # 64 channels of 28x28, enlarged 2x: 8 tiles of 56 a row
        assert heat.size == (112, 112)  # the photo as the eval transform cropped it
    assert not list(out.glob("fc*.png"))
    assert cli("report", out).exit_code == 0 and (out / "index.html").exists()
    again = cli(
        "capture",
        chelsea,
        "-m",
        "resnet18",
        "-l",
        "layer2",
        "--input-size",
        "3,112,112",
        "-o",
        out,
        "--overwrite",
    )
    assert again.exit_code == 0, again.stderr
    left = sorted(p.name for p in out.iterdir())
    assert left == ["inputs.parquet", "layer2.npy", "manifest.json"], (
        left
    )  # no stale picture, page, report folder or record
