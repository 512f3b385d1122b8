"""show: captured tensors (a real capture of test_resnet on a real photo, and hand-made arrays) as PNGs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import photo_batch
from PIL import Image

from hookdump import api
from hookdump.viz import LUT, SEPARATOR

PAD = 2  # the documented padding between and around tiles


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory, chelsea: Path) -> Path:
    """test_resnet's layer1, layer3 and head on the chelsea photo, as .npy, .pt and one .safetensors."""
    out = tmp_path_factory.mktemp("show") / "out"
    api.capture([str(chelsea)], ["layer1", "layer3", "fc"], model="test_resnet", out=out,
                formats="npy,pt,safetensors")  # fmt: skip
    return out


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB")).astype(int)


def grid_size(c: int, h: int, w: int, max_channels: int = 64) -> tuple[int, int, int, int]:
    """(width, height, columns, enlarge factor) of the documented grid, computed without hookdump."""
    shown = min(c, max_channels)
    factor = max(1, 64 // max(h, w))
    cols = math.ceil(math.sqrt(shown))
    rows = math.ceil(shown / cols)
    return cols * (w * factor + PAD) + PAD, rows * (h * factor + PAD) + PAD, cols, factor


def tile(image: np.ndarray, k: int, cols: int, th: int, tw: int) -> np.ndarray:
    """Grey levels of the k-th tile of a grid (row-major)."""
    r, c = divmod(k, cols)
    top, left = PAD + r * (th + PAD), PAD + c * (tw + PAD)
    return image[top : top + th, left : left + tw, 0]


def test_real_capture_as_a_channel_grid(cli, captured: Path) -> None:
    result = cli("show", captured / "layer1.npy")
    assert result.exit_code == 0, result.stderr
    png = captured / "layer1.png"
    assert f"wrote {png} (" in result.stdout and "layer1 (output)" in result.stdout
    maps = np.load(captured / "layer1.npy")[0]
    c, h, w = maps.shape
    width, height, cols, s = grid_size(c, h, w)
    image = pixels(png)
    assert image.shape == (height, width, 3)
    assert f"({width}x{height})" in result.stdout
    # every tile is its channel min-max scaled to 0..255 and enlarged s times (nearest)
    for k in (0, c // 2, c - 1):
        a = maps[k]
        want = np.kron(np.round((a - a.min()) / (a.max() - a.min()) * 255), np.ones((s, s)))
        np.testing.assert_allclose(tile(image, k, cols, h * s, w * s), want, atol=1)
    assert tuple(image[0, 0]) == SEPARATOR


def test_npy_pt_safetensors_and_folder_give_the_same_png(cli, captured: Path, tmp_path: Path) -> None:
    st = captured / "tensors.safetensors"
    runs = {
        "npy": (captured / "layer3.npy",),
        "pt": (captured / "layer3.pt",),
        "st": (st, "--key", "layer3"),
        "dir": (captured, "--key", "layer3"),
    }
    images = []
    for name, args in runs.items():
        result = cli("show", *args, "--max-channels", "10", "-o", tmp_path / f"{name}.png")
        assert result.exit_code == 0, result.stderr
        images.append(pixels(tmp_path / f"{name}.png"))
    c, h, w = np.load(captured / "layer3.npy").shape[1:]
    width, height, _, _ = grid_size(c, h, w, max_channels=10)
    assert images[0].shape == (height, width, 3) and c > 10
    for other in images[1:]:
        np.testing.assert_array_equal(images[0], other)
    # without -o, a safetensors key goes to <key>.png beside the file
    assert cli("show", st, "--key", "layer1").exit_code == 0
    assert (captured / "layer1.png").is_file()


def test_ramp_channel_is_a_ramp_and_a_constant_one_is_black(cli, tmp_path: Path) -> None:
    maps = np.zeros((1, 3, 4, 5), np.float32)
    maps[0, 0] = 3 + 7 * np.arange(5)  # a ramp along the width, not starting at 0
    maps[0, 1] = 42.0  # constant
    maps[0, 2] = -np.arange(20).reshape(4, 5)  # falling, row-major
    np.save(tmp_path / "ramp.npy", maps)
    result = cli("show", tmp_path / "ramp.npy")
    assert result.exit_code == 0, result.stderr
    image = pixels(tmp_path / "ramp.png")
    width, height, cols, s = grid_size(3, 4, 5)
    assert (width, height, cols, s) == (126, 102, 2, 12) and image.shape == (102, 126, 3)
    first = tile(image, 0, cols, 4 * s, 5 * s)
    assert (first == np.repeat([0, 64, 128, 191, 255], s)[None, :]).all()
    assert (tile(image, 1, cols, 4 * s, 5 * s) == 0).all()
    third = tile(image, 2, cols, 4 * s, 5 * s)
    assert third[0, 0] == 255 and third[-1, -1] == 0 and third[s, 0] == round(255 * 14 / 19)
    assert (tile(image, 3, cols, 4 * s, 5 * s)[..., None] == SEPARATOR[0]).all()  # the empty slot


def test_tokens_with_a_class_token_become_a_square_grid(cli, tmp_path: Path) -> None:
    tokens = np.zeros((2, 17, 3), np.float32)
    tokens[1, 0, :] = 1000.0  # the class token: dropped, or it would swamp the scaling
    tokens[1, 1:, 0] = np.arange(16)
    np.save(tmp_path / "vit.npy", tokens)
    result = cli("show", tmp_path / "vit.npy", "--index", "1")
    assert result.exit_code == 0, result.stderr
    assert "4x4 grid (first token dropped: a class token)" in result.stdout
    image = pixels(tmp_path / "vit.png")
    width, height, cols, s = grid_size(3, 4, 4)
    assert image.shape == (height, width, 3)
    first = tile(image, 0, cols, 4 * s, 4 * s)
    want = np.kron(np.round(np.arange(16).reshape(4, 4) / 15 * 255), np.ones((s, s)))
    np.testing.assert_array_equal(first, want)


def test_overlay_puts_the_hot_spot_where_it_was(cli, tmp_path: Path) -> None:
    photo = tmp_path / "grey.png"
    Image.new("RGB", (160, 120), (128, 128, 128)).save(photo)
    maps = np.zeros((1, 4, 8, 8), np.float32)
    maps[0, 2, 0:2, 6:8] = -5.0  # |activation|: a negative peak is hot too; top-right corner
    np.save(tmp_path / "act.npy", maps)
    result = cli("show", tmp_path / "act.npy", "--overlay", photo)
    assert result.exit_code == 0, result.stderr
    assert "the whole photo (160x120" in result.stdout
    image = pixels(tmp_path / "act.overlay.png")
    assert image.shape == (120, 160, 3)
    hot = 0.5 * 128 + 0.5 * LUT[255]
    cold = 0.5 * 128 + 0.5 * LUT[0]
    np.testing.assert_allclose(image[8, 150], hot, atol=1)  # inside the hot block, top right
    np.testing.assert_allclose(image[110, 10], cold, atol=1)  # far from it
    brightest = np.unravel_index(image.sum(axis=2).argmax(), image.shape[:2])
    assert brightest[0] < 30 and brightest[1] >= 120  # rows 0-1 of 8, columns 6-7 of 8


def test_overlay_on_a_capture_lies_on_the_model_crop(cli, captured: Path, chelsea: Path, tmp_path) -> None:
    import timm

    out = tmp_path / "plain.png"
    result = cli("show", captured / "layer1.npy", "--overlay", chelsea, "--alpha", "0", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "note:" not in result.stderr  # the captured photo itself
    manifest = json.loads((captured / "manifest.json").read_text())
    _, h, w = manifest["transform"]["input_size"]
    # alpha 0: the photo exactly as timm's eval transform fed it to the model (undo the normalisation)
    x = photo_batch(timm.create_model("test_resnet"), chelsea)[0].numpy()
    mean, std = (np.array(manifest["transform"][k])[:, None, None] for k in ("mean", "std"))
    seen = np.round((x * std + mean) * 255).transpose(1, 2, 0)
    image = pixels(out)
    assert image.shape == (h, w, 3)
    assert np.abs(image - seen).max() <= 1


def test_overlay_of_another_photo_says_so(cli, captured: Path, tmp_path: Path) -> None:
    import skimage

    coffee = Path(skimage.__file__).parent / "data" / "coffee.png"
    result = cli("show", captured / "layer1.npy", "--overlay", coffee, "-o", tmp_path / "c.png")
    assert result.exit_code == 0, result.stderr
    assert "coffee.png` is not the image 0 of this capture" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("missing.npy",), 4, "`missing.npy` does not exist"),
        (("notes.txt",), 4, "is not a tensor file"),
        (("junk.npy",), 4, "is not a .npy file numpy can read"),
        (("CAP/fc.npy",), 4, "(1, 1000) (a vector per image) has no spatial map"),
        (("odd.npy",), 4, "7 tokens are not a square grid"),
        (("CAP/layer1.npy", "--index", "1"), 2, "--index 1 is out of range: the tensor holds 1 image(s)"),
        (("CAP/layer1.npy", "--index", "-1"), 2, "--index"),
        (("CAP",), 2, "Say which tensor in"),
        (("CAP", "--key", "layer2"), 2, "Did you mean: layer3, layer1?"),
        (("CAP/tensors.safetensors", "--key", "nope"), 2, "No key `nope`"),
        (("CAP/layer1.npy", "--key", "layer1"), 2, "--key is for .safetensors files"),
        (("CAP/layer1.npy", "-o", "x.jpg"), 2, "does not end in .png"),
        (("CAP/layer1.npy", "--overlay", "nope.jpg"), 4, "--overlay `nope.jpg` does not exist"),
        (("CAP/layer1.npy", "--overlay", "notes.txt"), 4, "is not an image"),
        (("CAP/layer1.npy", "--alpha", "2"), 2, "--alpha"),
    ],
)
def test_errors_are_one_paragraph_and_write_nothing(
    cli, captured: Path, tmp_path: Path, monkeypatch, args: tuple[str, ...], code: int, text: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("not a tensor")
    Path("junk.npy").write_bytes(b"not numpy at all")
    np.save("odd.npy", np.zeros((1, 7, 3), np.float32))
    before = set(captured.iterdir())
    result = cli("show", *(a.replace("CAP", str(captured)) for a in args))
    assert result.exit_code == code, result.stderr
    assert text in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.png")) and set(captured.iterdir()) == before


def test_show_help_imports_no_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hookdump", "show", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "--overlay" in proc.stdout
    assert " torch\n" not in proc.stderr
