"""show: captured tensors (a real capture of test_resnet on a real photo, and hand-made arrays) as PNGs.

Every expected picture is computed here by hand from the documented geometry and the published colour-map
end points, never read from hookdump."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import photo_batch
from PIL import Image

from hookdump import api

PAD, LABEL, MIN_TILE, MIN_WIDTH = 2, 12, 64, 256  # the documented grid geometry
SEPARATOR = (40, 90, 160)
VIRIDIS_LOW, VIRIDIS_HIGH = (68, 1, 84), (253, 231, 37)  # matplotlib's viridis at 0 and 1
INFERNO_LOW, INFERNO_HIGH = (0, 0, 4), (252, 255, 164)
MAGENTA = (255, 0, 255)


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


def shown(cli, *args: object) -> dict | list:
    """Run ``show --json``; its JSON."""
    result = cli("show", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def layout(meta: dict, h: int, w: int) -> tuple[list[tuple[int, int]], int, int]:
    """Tile origins (top, left), tile height and width, as the README's geometry says; checks the size."""
    n = meta["channels_shown"]
    s = max(1, MIN_TILE // max(h, w))
    th, tw, cols = h * s, w * s, math.ceil(math.sqrt(n))
    rows, cap = math.ceil(n / cols), meta["caption_height"]
    assert (cap - PAD) % 12 == 0 and cap > PAD  # whole text lines of 12 px
    assert (meta["width"], meta["height"]) == (
        max(cols * (tw + PAD) + PAD, MIN_WIDTH),
        cap + rows * (LABEL + th + PAD) + PAD,
    )
    origins = [
        (cap + PAD + r * (LABEL + th + PAD) + LABEL, PAD + c * (tw + PAD))
        for r, c in (divmod(k, cols) for k in range(n))
    ]
    assert [(t["top"], t["left"]) for t in meta["tiles"]] == origins
    return origins, th, tw


def crop(image: np.ndarray, origin: tuple[int, int], th: int, tw: int) -> np.ndarray:
    return image[origin[0] : origin[0] + th, origin[1] : origin[1] + tw]


def grey_levels(a: np.ndarray, s: int) -> np.ndarray:
    """A map min-max scaled to 0..255 and enlarged s times (nearest), by hand."""
    return np.kron(np.round((a - a.min()) / (a.max() - a.min()) * 255), np.ones((s, s)))


def test_bright_square_lands_where_the_grid_says(cli, tmp_path: Path) -> None:
    maps = np.zeros((1, 6, 5, 7), np.float32)
    maps[0, 4, 1:3, 3:5] = 10.0  # a bright 2x2 square in channel 4, rows 1-2, columns 3-4
    np.save(tmp_path / "sq.npy", maps)
    result = cli("show", tmp_path / "sq.npy", "--json")
    assert result.exit_code == 0, result.stderr
    assert (
        "note: sq: 5 of 6 drawn channels are constant (0, 1, 2, 3, 5), drawn as the lowest colour"
        in result.stderr
    )
    meta = json.loads(result.stdout)
    assert meta["columns"] == 3 and [t["channel"] for t in meta["tiles"]] == list(range(6))
    image = pixels(tmp_path / "sq.png")
    origins, th, tw = layout(meta, 5, 7)
    s = 64 // 7
    square = np.zeros((th, tw), bool)
    square[1 * s : 3 * s, 3 * s : 5 * s] = True
    for c, origin in enumerate(origins):
        tile = crop(image, origin, th, tw)
        bright = square if c == 4 else np.zeros_like(square)
        assert (tile[bright] == VIRIDIS_HIGH).all() and (tile[~bright] == VIRIDIS_LOW).all()
    # nowhere else on the sheet: exactly the square's pixels are the brightest colour
    assert (image == VIRIDIS_HIGH).all(axis=2).sum() == square.sum()
    # each tile's label strip says its channel: drawn here with Pillow's own default font
    from PIL import ImageDraw, ImageFont

    for c, (top, left) in enumerate(origins):
        label = Image.new("RGB", (tw, LABEL), SEPARATOR)
        ImageDraw.Draw(label).text(
            (1, 0), str(c), fill=(255, 255, 255), font=ImageFont.load_default_imagefont()
        )
        np.testing.assert_array_equal(image[top - LABEL : top, left : left + tw], np.asarray(label))
    # --grey: the same square in white on black
    grey = shown(cli, tmp_path / "sq.npy", "--grey", "-o", tmp_path / "g.png")
    tile = crop(pixels(tmp_path / "g.png"), layout(grey, 5, 7)[0][4], th, tw)
    assert (tile[square] == 255).all() and (tile[~square] == 0).all()


def test_real_capture_as_a_channel_grid(cli, captured: Path) -> None:
    result = cli("show", captured / "layer1.npy", "--grey")
    assert result.exit_code == 0, result.stderr
    png = captured / "layer1.png"
    assert f"wrote {png} (" in result.stdout and "layer1 (output)" in result.stdout
    meta = shown(cli, captured / "layer1.npy", "--grey")
    maps = np.load(captured / "layer1.npy")[0]
    c, h, w = maps.shape
    origins, th, tw = layout(meta, h, w)
    image = pixels(png)
    assert (
        image.shape == (meta["height"], meta["width"], 3)
        and f"({meta['width']}x{meta['height']})" in result.stdout
    )
    for k in (0, c // 2, c - 1):  # each tile: its channel min-max scaled to 0..255, enlarged (nearest)
        if np.ptp(maps[k]) > 0:
            np.testing.assert_allclose(
                crop(image, origins[k], th, tw)[..., 0], grey_levels(maps[k], th // h), atol=1
            )
    assert tuple(image[-1, -1]) == SEPARATOR


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
    for other in images[1:]:
        np.testing.assert_array_equal(images[0], other)
    assert cli("show", st, "--key", "layer1").exit_code == 0  # a key goes to <key>.png beside the file
    assert (captured / "layer1.png").is_file()


def test_channels_top_k_and_global_scale(cli, tmp_path: Path) -> None:
    maps = np.zeros((1, 6, 3, 3), np.float32)
    for c, size in enumerate([1, 5, -9, 2, 7, 3]):
        maps[0, c] = size * np.arange(9).reshape(3, 3) / 8  # channel c: a ramp from 0 to size
    np.save(tmp_path / "m.npy", maps)
    top = shown(cli, tmp_path / "m.npy", "--top-k", "3")
    assert [t["channel"] for t in top["tiles"]] == [2, 4, 1]  # largest mean |activation| first, real indices
    part = shown(cli, tmp_path / "m.npy", "--channels", "2:5")
    assert [t["channel"] for t in part["tiles"]] == [2, 3, 4] and part["selection"] == "channels 2:5 of 6"
    # global: one min/max (-9 .. 7) over the drawn channels 3 and 4 -> here 0 .. 7
    meta = shown(
        cli, tmp_path / "m.npy", "--channels", "3:5", "--scale", "global", "--grey", "-o", tmp_path / "g.png"
    )
    image = pixels(tmp_path / "g.png")
    origins, th, tw = layout(meta, 3, 3)
    for k, c in enumerate((3, 4)):
        want = np.kron(np.round(maps[0, c] / 7 * 255), np.ones((th // 3, tw // 3)))
        np.testing.assert_allclose(crop(image, origins[k], th, tw)[..., 0], want, atol=1)


def test_tokens_with_a_class_token_become_a_square_grid(cli, tmp_path: Path) -> None:
    tokens = np.zeros((2, 17, 3), np.float32)
    tokens[1, 0, :] = 1000.0  # the class token: dropped, or it would swamp the scaling
    tokens[1, 1:, 0] = np.arange(16)
    np.save(tmp_path / "vit.npy", tokens)
    result = cli("show", tmp_path / "vit.npy", "--index", "1", "--grey")
    assert result.exit_code == 0, result.stderr
    assert "4x4 grid (first token dropped: a class token)" in result.stdout
    meta = shown(cli, tmp_path / "vit.npy", "--index", "1", "--grey")
    origins, th, tw = layout(meta, 4, 4)
    first = crop(pixels(tmp_path / "vit.png"), origins[0], th, tw)[..., 0]
    np.testing.assert_array_equal(first, grey_levels(np.arange(16.0).reshape(4, 4), th // 4))


def test_degenerate_maps_are_said_and_drawn_visibly(cli, tmp_path: Path) -> None:
    bad = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)
    bad[0, 0, 0, 0], bad[0, 1, 2, 3], bad[0, 1, 0, 1] = np.nan, np.inf, -np.inf
    np.save(tmp_path / "bad.npy", bad)
    result = cli("show", tmp_path / "bad.npy", "--json")
    assert (
        "note: bad holds 1 NaN and 2 Inf of 24 values, drawn in magenta; the scaling ignores them"
        in result.stderr
    )
    meta = json.loads(result.stdout)
    origins, th, tw = layout(meta, 3, 4)
    image = pixels(tmp_path / "bad.png")
    s = th // 3
    assert (crop(image, origins[0], th, tw)[:s, :s] == MAGENTA).all()
    assert (crop(image, origins[1], th, tw)[2 * s :, 3 * s :] == MAGENTA).all()
    assert (image == MAGENTA).all(axis=2).sum() == 3 * s * s
    # finite values keep their scale: channel 1's finite max (22) is the top colour
    assert tuple(crop(image, origins[1], th, tw)[2 * s, 2 * s]) == VIRIDIS_HIGH
    np.save(tmp_path / "pooled.npy", np.arange(5, dtype=np.float32).reshape(1, 5, 1, 1))
    result = cli("show", tmp_path / "pooled.npy", "--grey")
    assert (
        "note: pooled: the maps are 1x1 (one value per channel): drawn on one global scale instead"
        in result.stderr
    )
    np.save(tmp_path / "flat.npy", np.full((1, 3, 4, 4), 2.5, np.float32))
    result = cli("show", tmp_path / "flat.npy")
    assert (
        result.exit_code == 0
        and "note: flat: all 3 drawn channels are constant, drawn as the lowest colour (--scale global"
        in result.stderr
    )
    result = cli("show", tmp_path / "flat.npy", "--scale", "global")
    assert "note: flat: every drawn value is 2.5: all tiles drawn as the lowest colour" in result.stderr


def test_a_folder_several_files_and_every_image_at_once(cli, captured: Path, tmp_path: Path) -> None:
    listing = shown(cli, captured)  # every tensor of the capture (fc has no map: skipped, said)
    assert [Path(r["path"]).name for r in listing] == ["layer1.png", "layer3.png"]
    result = cli("show", captured, "-o", tmp_path / "pngs")
    assert (
        "note: fc: skipped: A tensor of shape (1, 1000)" in result.stderr
        and "wrote 2 PNG(s)" in result.stdout
    )
    pngs = sorted(p.name for p in (tmp_path / "pngs").iterdir())
    assert pngs == [".hookdump-files.json", "layer1.png", "layer3.png"]  # and the record of what it wrote
    batch = np.random.default_rng(0).standard_normal((3, 2, 4, 4)).astype(np.float32)
    np.save(tmp_path / "b.npy", batch)
    np.save(tmp_path / "c.npy", batch[:1])
    every = shown(cli, tmp_path / "b.npy", tmp_path / "c.npy", "--index", "all", "--grey")
    assert [Path(r["path"]).name for r in every] == ["b.img0.png", "b.img1.png", "b.img2.png", "c.img0.png"]
    for r in every[:3]:  # image i's channel 1, by hand
        origins, th, tw = layout(r, 4, 4)
        tile = crop(pixels(Path(r["path"])), origins[1], th, tw)[..., 0]
        np.testing.assert_allclose(tile, grey_levels(batch[r["index"], 1], th // 4), atol=1)


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
    np.testing.assert_allclose(image[8, 150], 0.5 * 128 + 0.5 * np.array(INFERNO_HIGH), atol=1)
    np.testing.assert_allclose(image[110, 10], 0.5 * 128 + 0.5 * np.array(INFERNO_LOW), atol=1)
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
        (("empty.npy",), 4, "holds an empty tensor of shape (0, 8, 4, 4): there is nothing to draw"),
        (("CAP/fc.npy",), 4, "(1, 1000) (a vector per image) has no spatial map"),
        (("odd.npy",), 4, "7 tokens are not a square grid"),
        (("CAP/layer1.npy", "--index", "1"), 2, "--index 1 is out of range: the tensor holds 1 image(s)"),
        (("CAP/layer1.npy", "--index", "-1"), 2, "--index -1 is out of range"),
        (("CAP/layer1.npy", "--index", "some"), 2, "--index `some` is not an image number"),
        (("CAP", "--key", "layer2"), 2, "Did you mean: layer3, layer1?"),
        (("CAP/tensors.safetensors", "--key", "nope"), 2, "No key `nope`"),
        (("CAP/layer1.npy", "--key", "layer1"), 2, "--key is for .safetensors files"),
        (("CAP/layer1.npy", "-o", "x.jpg"), 2, "does not end in .png"),
        (("CAP", "-o", "x.png"), 2, "names one PNG, but this draws 3 pictures"),
        (
            ("CAP/layer1.npy", "--channels", "30:40"),
            2,
            "--channels `30:40` is outside the 32 channels of layer1",
        ),
        (("CAP/layer1.npy", "--channels", "x"), 2, "--channels `x` is not A:B"),
        (("CAP/layer1.npy", "--channels", "0:4", "--top-k", "2"), 2, "--channels and --top-k both pick"),
        (("CAP/layer1.npy", "--scale", "log"), 2, "--scale `log` is not one of channel, global"),
        (("CAP/layer1.npy", "--gradcam"), 2, "Add --overlay PHOTO"),
        (("CAP/layer1.npy", "--overlay", "nope.jpg"), 4, "--overlay `nope.jpg` does not exist"),
        (("CAP/layer1.npy", "--overlay", "notes.txt"), 4, "is not an image"),
        (("CAP/layer1.npy", "--alpha", "2"), 2, "--alpha"),
        (("CAP/layer1.npy", "junk.npy"), 4, "is not a .npy file"),  # several: one bad, none written
        (("two.npy", "CAP/layer1.npy", "--index", "1"), 2, "the tensor holds 1 image(s)"),  # the 2nd fails
    ],
)
def test_errors_are_one_paragraph_and_write_nothing(
    cli, captured: Path, tmp_path: Path, monkeypatch, args: tuple[str, ...], code: int, text: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("not a tensor")
    Path("junk.npy").write_bytes(b"not numpy at all")
    np.save("odd.npy", np.zeros((1, 7, 3), np.float32))
    np.save("empty.npy", np.zeros((0, 8, 4, 4), np.float32))
    np.save("two.npy", np.ones((2, 3, 4, 4), np.float32))
    before = set(captured.iterdir())
    result = cli("show", *(a.replace("CAP", str(captured)) for a in args))
    assert result.exit_code == code, result.stderr
    assert text in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.rglob("*.png")) and set(captured.iterdir()) == before


def test_show_help_imports_no_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hookdump", "show", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "--overlay" in proc.stdout
    assert " torch\n" not in proc.stderr


def bfloat16_safetensors(path: Path, name: str, values: np.ndarray) -> None:
    """A safetensors file of one bfloat16 tensor, written by hand (values exact in bfloat16)."""
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps(
        {name: {"dtype": "BF16", "shape": list(values.shape), "data_offsets": [0, len(bits)]}}
    )
    path.write_bytes(len(header).to_bytes(8, "little") + header.encode() + bits)


def test_many_pngs_and_a_report_without_torch(captured: Path, chelsea: Path, tmp_path) -> None:
    rng = np.random.default_rng(1)
    files = []
    for i in range(3):
        np.save(tmp_path / f"t{i}.npy", rng.standard_normal((1, 4, 6, 6)).astype(np.float32))
        files.append(str(tmp_path / f"t{i}.npy"))
    exact = np.array([-2, -1.5, 0, 0.25, 1, 3, 4, 8], np.float32).reshape(1, 2, 2, 2)
    bfloat16_safetensors(tmp_path / "bf.safetensors", "half", exact)
    shutil.copytree(captured, tmp_path / "copy")  # report writes into the folder
    runs = [
        ["show", *files, str(tmp_path / "bf.safetensors"), "--grey"],
        ["show", str(captured), "--key", "layer1", "--overlay", str(chelsea), "-o", str(tmp_path / "o.png")],
        ["report", str(tmp_path / "copy")],
    ]
    script = (
        "import sys\nfrom hookdump.cli.app import app\n"
        f"for args in {runs!r}:\n"
        "    try:\n        app(args)\n"
        "    except SystemExit as done:\n        assert done.code == 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("wrote ") == 4 + 1 + 1 + 1  # 4 PNGs, their total line, the overlay, the report
    assert all((tmp_path / f"t{i}.png").is_file() for i in range(3)) and (tmp_path / "o.png").is_file()
    image = pixels(tmp_path / "half.png")  # bfloat16 read right: channel 1 is 1, 3, 4, 8 scaled by hand
    width = max(2 * (64 // 2 * 2 + PAD) + PAD, MIN_WIDTH)
    assert image.shape[1] == width
    tile = image[-PAD - 64 : -PAD, PAD + 64 + PAD : PAD + 2 * 64 + PAD, 0]
    np.testing.assert_allclose(
        tile, np.kron(np.round((np.array([[1, 3], [4, 8]]) - 1) / 7 * 255), np.ones((32, 32))), atol=1
    )
