"""Inputs: images that are not 8-bit, EXIF orientation, the manifest record, what a folder walk takes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from common import inputs_of
from PIL import Image

from hookdump.errors import EXIT_INPUT, InputError
from hookdump.inputs import files as inputs
from hookdump.inputs import images
from hookdump.inputs.images import open_image
from hookdump.inputs.spec import InputSpec

MODEL = ("-m", "test_resnet")
SIXTEEN_BIT = "16-bit grayscale scaled to 8 bits (value / 257), then to RGB"


def _gray(chelsea: Path) -> np.ndarray:
    """The cat photo as 8-bit grayscale pixels (PIL's own RGB -> L)."""
    with Image.open(chelsea) as image:
        return np.asarray(image.convert("L"))


def _sixteen_bit_png(chelsea: Path, path: Path) -> Path:
    image = Image.fromarray(_gray(chelsea).astype(np.uint16) * 257)
    assert image.mode == "I;16"
    image.save(path)
    return path


def _sixteen_bit_pgm(chelsea: Path, path: Path) -> Path:
    """A binary PGM with maxval 65535 (Pillow opens it as mode "I")."""
    gray = _gray(chelsea)
    header = f"P5 {gray.shape[1]} {gray.shape[0]} 65535\n".encode()
    path.write_bytes(header + (gray.astype(">u2") * 257).tobytes())
    return path


def _float_tiff(values: np.ndarray, path: Path) -> Path:
    image = Image.fromarray(values.astype(np.float32))
    assert image.mode == "F"
    image.save(path)
    return path


@pytest.mark.parametrize(("maker", "mode"), [(_sixteen_bit_png, "I;16"), (_sixteen_bit_pgm, "I")])
def test_16bit_grayscale_opens_to_the_8bit_pixels(chelsea: Path, tmp_path: Path, maker, mode: str) -> None:
    path = maker(chelsea, tmp_path / f"cat16{'.png' if mode == 'I;16' else '.pgm'}")
    with Image.open(path) as image:
        assert image.mode == mode
    gray = _gray(chelsea)
    np.testing.assert_array_equal(np.asarray(open_image(path, "L")), gray)
    np.testing.assert_array_equal(np.asarray(open_image(path)), np.stack([gray] * 3, axis=-1))
    assert images.describe(path) == {
        "mode": mode,
        "size": [gray.shape[1], gray.shape[0]],
        "conversion": SIXTEEN_BIT,
    }


def test_16bit_rgb_tiff_is_reduced_by_pillow_and_recorded(chelsea: Path, tmp_path: Path) -> None:
    tifffile = pytest.importorskip("tifffile")
    with Image.open(chelsea) as image:
        rgb = np.asarray(image.convert("RGB"))
    tifffile.imwrite(tmp_path / "cat48.tif", rgb.astype(np.uint16) * 257, photometric="rgb")
    np.testing.assert_array_equal(np.asarray(open_image(tmp_path / "cat48.tif")), rgb)
    described = images.describe(tmp_path / "cat48.tif")
    assert described["mode"] == "RGB"
    assert described["conversion"].startswith("16-bit RGB reduced to 8 bits by Pillow")


def test_float_tiff_in_unit_range_is_scaled_by_255(chelsea: Path, tmp_path: Path) -> None:
    gray = _gray(chelsea)
    path = _float_tiff(gray / 255.0, tmp_path / "cat.tif")
    opened = np.asarray(open_image(path, "L")).astype(int)
    assert np.abs(opened - gray).max() <= 1
    assert images.describe(path)["conversion"] == (
        "32-bit float in [0, 1] scaled to 8 bits (value * 255), then to RGB"
    )


def test_images_beyond_the_range_hookdump_scales_are_refused(chelsea: Path, tmp_path: Path) -> None:
    gray = _gray(chelsea)
    values = gray * (300.0 / 255.0)
    values[0, :2] = 0.0, 300.0
    floats = _float_tiff(values, tmp_path / "bright.tif")
    with pytest.raises(InputError) as refused:
        open_image(floats)
    assert refused.value.exit_code == EXIT_INPUT
    assert "bright.tif" in refused.value.message and "0 to 300" in refused.value.message
    assert "8-bit or 16-bit" in (refused.value.hint or "")
    wide = tmp_path / "wide.tif"
    integers = gray.astype(np.int32) * 257
    integers[0, 0] = 70000
    Image.fromarray(integers).save(wide)  # mode "I": 32-bit integers
    with pytest.raises(InputError, match="16-bit range"):
        open_image(wide)


def test_exif_orientation_is_applied_as_a_viewer_shows_it(chelsea: Path, tmp_path: Path) -> None:
    path = tmp_path / "portrait.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown rotated 90 degrees clockwise
    with Image.open(chelsea) as image:
        width, height = image.size
        image.convert("RGB").save(path, exif=exif, quality=95)
    shown = open_image(path)
    assert shown.size == (height, width)
    with Image.open(path) as stored:
        expected = np.asarray(stored.convert("RGB").transpose(Image.Transpose.ROTATE_270))
    np.testing.assert_array_equal(np.asarray(shown), expected)
    assert images.describe(path) == {
        "mode": "RGB",
        "size": [width, height],
        "exif_transposed": "rotated 90 degrees clockwise (EXIF orientation 6)",
    }


@pytest.mark.parametrize(
    ("mode", "suffix", "text"),
    [
        ("P", ".png", "palette to RGB"),
        ("RGBA", ".png", "RGBA to RGB (alpha dropped)"),
        ("LA", ".png", "grayscale with alpha to RGB (alpha dropped)"),
        ("CMYK", ".jpg", "CMYK to RGB"),
        ("1", ".png", "1-bit black and white to RGB"),
        ("L", ".png", "8-bit grayscale to RGB"),
    ],
)
def test_other_modes_go_through_pillow_and_are_described(
    chelsea: Path, tmp_path: Path, mode: str, suffix: str, text: str
) -> None:
    path = tmp_path / f"cat-{mode}{suffix}"
    with Image.open(chelsea) as image:
        image.convert(mode).save(path)
    with Image.open(path) as image:
        assert image.mode == mode
        expected = np.asarray(image.convert("RGB"))
    np.testing.assert_array_equal(np.asarray(open_image(path)), expected)
    described = images.describe(path)
    assert described["mode"] == mode and described["conversion"].startswith(text)


def test_images_already_in_the_model_mode_are_described_by_mode_and_size_only(
    chelsea: Path, tmp_path: Path
) -> None:
    with Image.open(chelsea) as image:
        size = list(image.size)
        image.convert("L").save(tmp_path / "gray.png")
    assert images.describe(chelsea) == {"mode": "RGB", "size": size}
    assert images.describe(tmp_path / "gray.png", "L") == {"mode": "L", "size": size}


def _tree(photos: Path) -> None:
    """Hidden files and folders, AppleDouble files (not images at all), and a symlink loop."""
    shutil.copy(photos / "chelsea.png", photos / ".hidden.png")
    (photos / ".thumbs").mkdir()
    shutil.copy(photos / "coffee.png", photos / ".thumbs" / "coffee.png")
    (photos / "._chelsea.png").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    (photos / "more" / "back").symlink_to(photos, target_is_directory=True)


def test_folder_walk_skips_hidden_and_appledouble_files(photos: Path) -> None:
    _tree(photos)
    found = inputs.collect(InputSpec((str(photos),)))
    assert found == [photos / "chelsea.png", photos / "coffee.png", photos / "more" / "astronaut.png"]
    # named explicitly, or matched by a glob, a hidden file is taken
    assert (
        inputs.collect(InputSpec((str(photos / ".hidden.png"), str(photos / ".h*.png"))))
        == [photos / ".hidden.png"] * 2
    )


def test_folder_walk_sorts_as_paths_sort_and_takes_linked_files(photos: Path) -> None:
    """``a/b.png`` before ``a-b.png`` before ``a.png`` (paths sort by their parts; the strings would not);
    a link to a file is taken, a dangling one is not; checked against pathlib's own walk and sort."""
    root = photos / "more"
    (root / "a").mkdir()
    for name in ("a/b.png", "a-b.png", "a.png", "A.png"):
        shutil.copy(photos / "chelsea.png", root / name)
    (root / "linked.png").symlink_to(photos / "coffee.png")
    (root / "dangling.png").symlink_to(photos / "gone.png")
    found = inputs.collect(InputSpec((str(root),)))
    expected = sorted(p for p in root.rglob("*") if p.is_file() and "back" not in p.parts)
    assert found == expected
    assert [p.relative_to(root).as_posix() for p in found[:4]] == ["A.png", "a/b.png", "a-b.png", "a.png"]
    assert root / "linked.png" in found and root / "dangling.png" not in found


def test_excluded_folder_is_not_entered_however_it_is_spelled(photos: Path, monkeypatch) -> None:
    (photos / "acts").mkdir()
    shutil.copy(photos / "chelsea.png", photos / "acts" / "conv1.png")
    monkeypatch.chdir(photos / "more")
    found = inputs.collect(InputSpec((str(photos),)), exclude=(Path("../acts"),))
    assert [p.name for p in found] == ["chelsea.png", "coffee.png", "astronaut.png"]


def test_unreadable_subfolder_is_an_input_error(photos: Path, tmp_path: Path) -> None:
    """Through the console script; as root (CI), without the capabilities that let root read any folder."""
    locked = photos / "locked"
    locked.mkdir()
    locked.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root reads a chmod 000 folder, and setpriv (util-linux) is absent to drop that")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "hookdump", "capture", *MODEL, "-l", "conv1", str(photos),
             "-o", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        locked.chmod(0o755)
    assert proc.returncode == EXIT_INPUT, proc.stderr
    assert "locked` cannot be read: permission denied" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def _input_paths(out: Path) -> list[str]:
    return [i["path"] for i in inputs_of(out)]


def test_capture_into_the_photo_folder_twice_reads_only_the_photos(cli, photos: Path) -> None:
    acts = photos / "acts"
    first = cli("capture", *MODEL, "-l", "conv1", photos, "-o", acts)
    assert first.exit_code == 0, first.stderr
    shown = cli("show", acts / "conv1.npy")  # writes acts/conv1.png, an image inside the photo folder
    assert shown.exit_code == 0, shown.stderr
    assert (acts / "conv1.png").is_file()
    again = cli("capture", *MODEL, "-l", "conv1", photos, "-o", acts, "--overwrite")
    assert again.exit_code == 0, again.stderr
    assert len(_input_paths(acts)) == 3
    assert not any(Path(p).is_relative_to(acts) for p in _input_paths(acts))


def test_cli_skips_hidden_files_in_a_folder_but_takes_named_ones(cli, photos: Path, tmp_path: Path) -> None:
    _tree(photos)
    result = cli("capture", *MODEL, "-l", "conv1", photos, "-o", tmp_path / "a")
    assert result.exit_code == 0, result.stderr
    names = [Path(p).name for p in _input_paths(tmp_path / "a")]
    assert names == ["chelsea.png", "coffee.png", "astronaut.png"]
    named = cli("capture", *MODEL, "-l", "conv1", photos / ".hidden.png", "-o", tmp_path / "b")
    assert named.exit_code == 0, named.stderr
    assert _input_paths(tmp_path / "b") == [str(photos / ".hidden.png")]


def test_manifest_records_the_16bit_conversion(cli, chelsea: Path, tmp_path: Path) -> None:
    path = _sixteen_bit_png(chelsea, tmp_path / "cat16.png")
    out = tmp_path / "out"
    result = cli("capture", *MODEL, "-l", "conv1", path, chelsea, "-o", out)
    assert result.exit_code == 0, result.stderr
    sixteen, eight = inputs_of(out)
    with Image.open(chelsea) as image:
        size = list(image.size)
    assert sixteen == {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "mode": "I;16",
        "size": size,
        "conversion": SIXTEEN_BIT,
    }
    assert eight == {
        "path": str(chelsea),
        "sha256": hashlib.sha256(chelsea.read_bytes()).hexdigest(),
        "mode": "RGB",
        "size": size,
    }
