"""report: OUT/index.html of real captures (resnet18 on real photos, a ViT with --grad and --attention), read
back with the standard library's HTML parser: every link resolves inside OUT, every layer has its section,
its numbers are numpy's; refusals; and a look at the page in a real browser (headless Chromium)."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
from common import CHECKOUT, PLUGINS, SKIMAGE_DATA, Cli
from helpers import cka_numpy
from PIL import Image
from read_back import check_links, page_of, section_id
from slow_runs import SLOW_BY_1, coffee_photos, start_run, wait_for

import hookdump

RESNET = ("-m", "resnet18", "--input-size", "3,64,64", "-l", "layer1", "-l", "fc")


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """resnet18's layer1 (maps) and fc (a vector) of two real photos (one name with a space), reported."""
    folder = tmp_path_factory.mktemp("report")
    photos = coffee_photos(folder / "photos", 1)
    shutil.copy(CHECKOUT / "hookdump" / "data" / "sample.jpg", photos / "cat photo.jpg")
    out = folder / "out"
    cli = Cli()
    result = cli("capture", *RESNET, photos, "-o", out, "--format", "npy,safetensors")
    assert result.exit_code == 0, result.stderr
    result = cli("report", out)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {out / 'index.html'}: 2 tensor(s), 1 picture(s), 2 input thumbnail(s)" in result.stdout
    return out


ANALYSED = ("chelsea", "coffee", "astronaut", "camera", "brick")


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """resnet18's layer1 and layer2 of five real photos, then `compare --png` and `top` of it, then `report`,
    all by the console script (forked)."""
    folder = tmp_path_factory.mktemp("analysed")
    (folder / "photos").mkdir()
    for name in ANALYSED:
        shutil.copy(SKIMAGE_DATA / f"{name}.png", folder / "photos" / f"{name}.png")
    out = folder / "out"
    for args in (
        ("capture", *RESNET[:4], "-l", "layer1", "-l", "layer2", "photos", "-o", out),
        ("compare", out, "--png"),
        ("top", out, "--layer", "layer1", "--channels", "0:3", "-k", "3"),
        ("report", out),
    ):  # fmt: skip
        done = forkrun.run(args, cwd=folder)
        assert done.returncode == 0, done.stderr
    assert "1 compare section(s), 1 top section(s)" in done.stdout
    return out


def test_compare_and_top_have_sections_of_their_own(analysed: Path, tmp_path: Path) -> None:
    page = check_links(analysed)
    assert "#compare-cka" in page.links and "#top-layer1" in page.links  # in the contents
    arrays = {n: np.load(analysed / f"{n}.npy").astype(np.float64) for n in ("layer1", "layer2")}
    # compare: the heat map as compare drew it, the caption naming layers, metric and estimator, the values
    # numpy's CKA of the files
    text = page.text["compare-cka"]
    assert "CKA (estimator unbiased)" in text and "[0] layer1, [1] layer2" in text and "5 inputs" in text
    [(src, width, height)] = page.figures["compare-cka"]
    assert src == "compare/cka.png"
    with Image.open(analysed / src) as picture:
        assert picture.format == "PNG" and picture.size == (width, height)
    want = [cka_numpy(arrays[r], arrays[c]) for r in arrays for c in arrays]
    assert np.abs(np.array(page.values["compare-cka"], dtype=float) - want).max() < 1e-9
    # top: a sheet per channel, captioned with the channel, k, the files ranked as numpy ranks them, values
    scores = arrays["layer1"].max(axis=(2, 3))
    names = sorted(f"{n}.png" for n in ANALYSED)
    assert [f[0] for f in page.figures["top-layer1"]] == [f"top/layer1/channel-{c}.png" for c in range(3)]
    for c, caption in enumerate(page.channels["top-layer1"]):
        order = np.argsort(-scores[:, c], kind="stable")[:3]
        assert caption.startswith(f"channel {c}, top 3 by max: 1. {names[order[0]]} (input {order[0]})")
        assert [caption.index(names[i]) for i in order] == sorted(caption.index(names[i]) for i in order)
    assert page.values["top-layer1"] == pytest.approx(
        [v for c in range(3) for v in np.sort(scores[:, c])[::-1][:3]], rel=1e-6
    )
    for src, width, height in page.figures["top-layer1"]:
        with Image.open(analysed / src) as picture:
            assert picture.size == (width, height)
    assert "Made from an earlier capture" not in page.text["compare-cka"] + page.text["top-layer1"]


def test_a_result_of_an_earlier_capture_is_marked_and_other_files_left_alone(
    analysed: Path, tmp_path: Path
) -> None:
    copy = shutil.copytree(analysed, tmp_path / "copy")
    record = json.loads((copy / "compare" / "cka.json").read_text())
    (copy / "compare" / "cka.json").write_text(json.dumps({**record, "a_manifest_sha256": "0" * 64}))
    (copy / "compare" / "notes.json").write_text('{"mine": true}')  # not a result: not shown, not touched
    (copy / "top" / "layer1" / "channel-1.png").unlink()
    done = forkrun.run(["report", copy, "--json"])
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert [c["record"] for c in written["compare"]] == ["compare/cka.json"]
    assert [s["picture"]["src"] for s in written["top"][0]["channels"]][1] is None
    page = check_links(copy)
    assert "Made from an earlier capture" in page.text["compare-cka"]
    assert "No picture: the PNG beside the record is gone" in page.channels["top-layer1"][1]
    assert (copy / "compare" / "notes.json").read_text() == '{"mine": true}'


def test_every_link_resolves_and_every_layer_has_its_section(resnet: Path, tmp_path: Path) -> None:
    page = check_links(resnet)
    manifest = json.loads((resnet / "manifest.json").read_text())
    for entry in manifest["tensors"]:
        name = entry.get("key") or Path(entry["file"]).stem
        text = page.text[section_id(page, name)]
        assert entry["layer"] in text and entry["kind"] in text and str(tuple(entry["shape"])) in text
        assert f"#t-{name}" in page.links and entry["file"] in page.links
    assert "manifest.json" in page.links
    # no script, no stylesheet or font from elsewhere: the page stands alone
    assert not {"script", "link", "iframe"} & page.tags
    # the layer1 picture: a PNG of the size the page gives; fc has none, and the page says why
    src, width, height = page.images[section_id(page, "layer1")]
    with Image.open(resnet / src) as image:
        assert image.format == "PNG" and image.size == (width, height)
    assert section_id(page, "fc") not in page.images
    assert (
        "No picture" in page.text[section_id(page, "fc")] and "(2, 1000)" in page.text[section_id(page, "fc")]
    )
    # the inputs, each with a thumbnail copied into the folder (a file name with a space too)
    thumbs = [link for link in page.links if link.startswith("report/inputs/")]
    assert len(thumbs) == 2 and "cat photo.jpg" in page.text["inputs"]
    # the folder still reads back as a capture, and copied elsewhere its page still works
    assert sorted(hookdump.open(resnet)) == ["fc", "layer1"]
    moved = shutil.copytree(resnet, tmp_path / "moved")
    shutil.rmtree(resnet / "report")
    try:
        check_links(moved)
    finally:
        shutil.copytree(moved / "report", resnet / "report")


def test_the_numbers_on_the_page_are_numpys(resnet: Path) -> None:
    page = page_of(resnet)
    for name in ("layer1", "fc"):
        array = np.load(resnet / f"{name}.npy").astype(np.float64)
        cells = page.stats[section_id(page, name)]
        got = {k: json.loads(v) for k, (v, _) in cells.items()}
        assert got["min"] == float(array.min()) and got["max"] == float(array.max())
        assert math.isclose(got["mean"], float(array.mean()), rel_tol=1e-9)
        assert math.isclose(got["std"], float(array.std()), rel_tol=1e-9)
        assert math.isclose(got["zeros"], float(np.mean(array == 0)), rel_tol=1e-12)
        assert got["nan"] == 0 and got["inf"] == 0 and "bad" not in cells["nan"][1]
        assert f"{got['max']:.4g}" in page.text[section_id(page, name)]  # shown rounded


def test_vit_grad_and_attention_and_json(cli, tmp_path: Path) -> None:
    out = tmp_path / "vit"
    args = ("-m", "vit_tiny_patch16_224", "-l", "blocks.0.attn", "--attention", "--grad", "--sample")
    assert cli("capture", *args, "-o", out).exit_code == 0
    result = cli("report", out, "--json", "--max-channels", "4")
    assert result.exit_code == 0, result.stderr
    written = json.loads(result.stdout)
    kinds = {s["name"]: s["kind"] for s in written["sections"]}
    assert kinds == {"blocks.0.attn": "output", "blocks.0.attn.grad": "grad", "blocks.0.attn.attn": "attn"}
    assert written["path"] == str(out / "index.html") and len(written["pictures"]) == 3
    assert all(Path(p).is_file() and Path(p).parent == out / "report" for p in written["pictures"])
    page = check_links(out)
    for section in written["sections"]:
        assert section["layer"] in page.text[section_id(page, section["name"])]
        assert section["picture"] == page.images[section_id(page, section["name"])][0]
    with Image.open(out / "report" / "blocks.0.attn.png") as image:  # 4 channels of 14x14 tokens: 2 x 2
        assert image.size[0] < 300
    grad = json.loads((out / "manifest.json").read_text())["grad"]
    assert f"grad classes{grad['classes'][0]}" in page.text["provenance"]  # th then td


def test_nan_and_inf_are_highlighted(cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    net = ("--import", PLUGINS / "nonfinite_plugin.py", "-m", "nonfinite_net", "--input-size", "3,16,16")
    assert cli("capture", *net, "-l", "spoil", "-l", "head", "--random-input", "-o", out).exit_code == 0
    assert cli("report", out).exit_code == 0
    page = check_links(out)
    spoil = page.stats[section_id(page, "spoil")]
    assert json.loads(spoil["nan"][0]) == 3 and "bad" in spoil["nan"][1] and "bad" in spoil["inf"][1]
    assert "bad" not in page.stats[section_id(page, "head")]["nan"][1]
    assert "NaN/Inf" in page.text[section_id(page, "spoil")] and "random" in page.text["inputs"]


def test_rerun_replaces_the_report_through_the_console_script(cli, resnet: Path) -> None:
    (resnet / "report" / "mine.png").write_bytes(b"a user's")  # not hookdump's: refused, kept
    proc = forkrun.run(["report", resnet, "--json"], timeout=120)
    assert proc.returncode == 2 and "report/mine.png` is in the way" in proc.stderr, proc.stderr
    assert (resnet / "report" / "mine.png").read_bytes() == b"a user's"
    (resnet / "report" / "mine.png").unlink()
    (resnet / "report" / "layer1.png").write_bytes(b"old")  # hookdump's, changed since: refused too
    proc = forkrun.run(["report", resnet, "--json"], timeout=120)
    assert proc.returncode == 2 and "changed since" in proc.stderr, proc.stderr
    (resnet / "report" / "layer1.png").unlink()
    proc = forkrun.run(["report", resnet, "--json"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pictures"] == [str(resnet / "report" / "layer1.png")]
    hidden = [p.name for p in resnet.iterdir() if p.name.startswith(".")]
    assert hidden == [".hookdump-files.json"]  # the record of what hookdump wrote; no scratch left behind
    check_links(resnet)
    stats = cli("stats", resnet)
    assert stats.exit_code == 0 and "layer1" in stats.stdout


def test_refuses_what_is_not_a_finished_capture(cli, resnet: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("report", empty)
    assert result.exit_code == 4 and "no manifest.json" in result.stderr
    assert not (empty / "index.html").exists()
    # a real interrupted capture: refused with the fix
    out = tmp_path / "stopped"
    run = start_run(["capture", *SLOW_BY_1, str(coffee_photos(tmp_path / "photos", 4)), "-o", str(out)])
    wait_for(".hookdump-partial/progress.json", out, run)
    run.send_signal(signal.SIGINT)
    assert run.wait(timeout=60) == 130
    result = cli("report", out, "--json")
    assert result.exit_code == 4 and "--resume" in result.stderr
    assert json.loads(result.stdout)["kind"] == "input" and not (out / "index.html").exists()
    # an interrupted rerun beside a finished capture: the finished one is reported, under a banner
    finished = shutil.copytree(resnet, tmp_path / "finished")
    shutil.copytree(out / ".hookdump-partial", finished / ".hookdump-partial")
    result = cli("report", finished)
    assert result.exit_code == 0, result.stderr
    assert "interrupted capture waits" in result.stderr
    assert "interrupted capture waits" in (finished / "index.html").read_text()


def _shows(shot: np.ndarray, picture: np.ndarray, tolerance: int = 8) -> bool:
    """Whether ``picture`` (its top 40 rows) appears in ``shot`` pixel for pixel, give or take colour
    management: a few sample points pick the candidates, the whole patch decides."""
    patch = picture[:40].astype(int)
    h, w = patch.shape[:2]
    ys, xs = np.mgrid[: shot.shape[0] - h + 1, : shot.shape[1] - w + 1].reshape(2, -1)
    for py, px in ((0, 0), (h - 1, w - 1), (h // 2, w // 2), (h // 3, w // 5), (0, w - 1)):
        near = (np.abs(shot[ys + py, xs + px] - patch[py, px]) <= tolerance).all(-1)
        ys, xs = ys[near], xs[near]
    return any(
        np.abs(shot[y : y + h, x : x + w] - patch).max() <= tolerance for y, x in zip(ys, xs, strict=True)
    )


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (Debian: chromium)")
def test_a_look_in_chromium(analysed: Path, tmp_path: Path) -> None:
    """The page of a capture with compare and top results, as a browser draws it: the tensor's channel grid,
    the heat map and a contact sheet are on screen, pixel for pixel."""
    chromium = str(shutil.which("chromium"))
    shot = tmp_path / "page.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
    proc = subprocess.run(
        [chromium, *flags, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1280,3600", (analysed / "index.html").as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1280, 3600)
        pixels = np.asarray(image.convert("RGB")).astype(int)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 1000  # text, photos, pictures: not a blank page
    for shown in ("report/layer1.png", "compare/cka.png", "top/layer1/channel-2.png"):
        with Image.open(analysed / shown) as picture:  # on screen, whole
            assert _shows(pixels, np.asarray(picture.convert("RGB"))), shown
