"""`hookdump compare`: linear CKA (unbiased and biased) and RSA, checked against oracles written here: the
CKA formulas in numpy, CKA's invariances, the unbiased estimator near 0 on independent Gaussians, and
rsatoolbox's RDMs and comparisons on the same data; over real captures of two seeded tiny ViTs (random
weights, real photos) made by the console script."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
from common import SKIMAGE_DATA
from helpers import cka_numpy
from PIL import Image
from rsatoolbox.data import Dataset
from rsatoolbox.rdm import calc_rdm
from rsatoolbox.rdm import compare as rsa_compare

from hookdump.analysis import cka, rsa
from hookdump.analysis.gram import check_fits, gram_of
from hookdump.errors import UsageError

PHOTOS = ("chelsea", "coffee", "astronaut", "camera", "brick", "coins", "grass", "horse", "moon", "page")
VIT = ("-m", "vit_tiny_patch16_224", "--model-arg", "img_size=64", "--input-size", "3,64,64")
R18 = ("-m", "resnet18", "--input-size", "3,64,64", "-l", "layer1", "-l", "layer2")


def hd(*args: object) -> subprocess.CompletedProcess[str]:
    """The console script, forked from a server that imported it once (``forkrun``)."""
    return forkrun.run(args, timeout=600)


def cka_hookdump(x: np.ndarray, y: np.ndarray, unbiased: bool = True, chunk: int = 64) -> float | None:
    p = cka.prepare(gram_of(x, chunk=chunk).matrix, unbiased)
    q = cka.prepare(gram_of(y, chunk=chunk).matrix, unbiased)
    return cka.cka(p, q, cka.hsic(p, p), cka.hsic(q, q))


# --- the formulas on small cases ------------------------------------------------------------------------


@pytest.mark.parametrize("unbiased", [True, False])
def test_cka_is_the_formula_on_small_cases(unbiased: bool) -> None:
    rng = np.random.default_rng(0)
    for n, fx, fy in ((5, 3, 7), (12, 40, 9), (30, 200, 50)):
        x = rng.normal(size=(n, fx))
        y = np.tanh(x @ rng.normal(size=(fx, fy))) + 0.5 * rng.normal(size=(n, fy))
        got = cka_hookdump(x, y, unbiased)
        assert got == pytest.approx(cka_numpy(x, y, unbiased), abs=1e-12)


def test_cka_invariances() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(24, 16))
    q, _ = np.linalg.qr(rng.normal(size=(16, 16)))  # an orthogonal transform
    for unbiased in (True, False):
        assert cka_hookdump(x, x, unbiased) == pytest.approx(1.0, abs=1e-12)
        assert cka_hookdump(x, x @ q, unbiased) == pytest.approx(1.0, abs=1e-12)
        assert cka_hookdump(x, 7.5 * x, unbiased) == pytest.approx(1.0, abs=1e-12)
        assert cka_hookdump(x, -0.01 * (x @ q), unbiased) == pytest.approx(1.0, abs=1e-12)


def test_unbiased_cka_is_near_0_on_independent_gaussians_where_the_biased_is_not() -> None:
    rng = np.random.default_rng(2)
    unbiased, biased = [], []
    for _ in range(20):
        x, y = rng.normal(size=(32, 500)), rng.normal(size=(32, 500))
        unbiased.append(cka_hookdump(x, y, True, chunk=4096))
        biased.append(cka_hookdump(x, y, False, chunk=4096))
        assert unbiased[-1] == pytest.approx(cka_numpy(x, y, True), abs=1e-12)
        assert biased[-1] == pytest.approx(cka_numpy(x, y, False), abs=1e-12)
    u, b = np.array(unbiased), np.array(biased)
    print(f"N=32, 500 features, 20 draws: unbiased {u.mean():+.4f} (sd {u.std():.4f}), biased {b.mean():.4f}")
    assert abs(u.mean()) < 0.03 and np.abs(u).max() < 0.2
    assert b.min() > 0.9  # the classic estimator's bias at N << features


def test_too_few_inputs_or_too_little_memory_is_said() -> None:
    with pytest.raises(UsageError, match="at least 4 inputs"):
        cka.prepare(np.eye(3))
    with pytest.raises(UsageError, match=r"Gram matrices of 1000000 x 1000000 inputs need .*free") as error:
        check_fits(1_000_000, 12)
    assert "--layers" in error.value.hint


def test_rsa_figures_are_rsatoolboxs_on_the_same_data() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(15, 60))
    y = x[:, :30] ** 2 + rng.normal(size=(15, 30))
    worst = 0.0
    for distance in rsa.DISTANCES:
        mine = [rsa.rdm(gram_of(v, chunk=50), distance) for v in (x, y)]
        theirs = [calc_rdm(Dataset(v), method=distance).get_matrices()[0] for v in (x, y)]
        if distance == "euclidean":  # rsatoolbox's: the squared distance over the features
            theirs = [np.sqrt(t * v.shape[1]) for t, v in zip(theirs, (x, y), strict=True)]
        for m, t in zip(mine, theirs, strict=True):
            worst = max(worst, float(np.abs(m - t).max()))
            assert np.allclose(m, t, rtol=1e-9, atol=1e-10)
        for method in rsa.COMPARISONS:
            want = rsa_compare(
                calc_rdm(Dataset(x), method=distance), calc_rdm(Dataset(y), method=distance), method
            )
            got = rsa.compare_rdms(mine[0], mine[1], method)
            assert got == pytest.approx(float(want[0, 0]), abs=1e-10), (distance, method)
    print(f"RDMs: largest difference from rsatoolbox {worst:.1e}")
    ties = np.array([0, 1, 1, 2, 2, 2, 3, 0.5, 0.5]), np.array([1, 0, 1, 3, 3, 1, 2, 0, 2])
    brute = sum(
        np.sign(ties[0][i] - ties[0][j]) * np.sign(ties[1][i] - ties[1][j])
        for i in range(9) for j in range(i + 1, 9)
    )  # fmt: skip
    assert rsa.tau_a(ties[0].astype(float), ties[1].astype(float)) == pytest.approx(brute / 36)


# --- through the console script, on real captures -----------------------------------------------------------


@pytest.fixture(scope="module")
def vits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny ViTs of different seeds, every block, over ten real photos."""
    root = tmp_path_factory.mktemp("compare")
    photos = root / "photos"
    photos.mkdir()
    for name in PHOTOS:
        shutil.copy(SKIMAGE_DATA / f"{name}.png", photos / f"{name}.png")
    outs = []
    for seed in (0, 1):
        done = hd("capture", *VIT, "-l", "blocks.*", photos, "--seed", seed, "-o", root / f"vit{seed}", "-q")
        assert done.returncode == 0, done.stderr
        outs.append(root / f"vit{seed}")
    return outs[0], outs[1]


def _blocks(out: Path) -> dict[str, np.ndarray]:
    return {f"blocks.{i}": np.load(out / f"blocks.{i}.npy") for i in range(12)}


def test_compare_one_capture_is_the_formula_with_a_heat_map(vits: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = vits
    done = hd("compare", a, "--png", "--out", tmp_path / "cmp", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["metric"] == "cka" and found["estimator"] == "unbiased" and found["inputs"] == len(PHOTOS)
    blocks = _blocks(a)
    assert found["rows"] == found["cols"] == list(blocks)
    want = np.array([[cka_numpy(blocks[r], blocks[c]) for c in blocks] for r in blocks])
    assert np.abs(np.array(found["matrix"]) - want).max() < 1e-9
    png, record = tmp_path / "cmp" / "cka.png", tmp_path / "cmp" / "cka.json"
    assert found["files"] == [str(png), str(record)]
    with Image.open(png) as picture:
        assert picture.format == "PNG" and picture.width > 12 * 40 and picture.height > 12 * 40
    kept = json.loads(record.read_text())  # beside the picture: what --json printed, for `hookdump report`
    assert kept["hookdump_result"] == "compare" and kept["png"] == "cka.png"
    assert (
        kept["matrix"] == found["matrix"]
        and kept["rows"] == found["rows"]
        and kept["b_manifest_sha256"] is None
    )
    assert kept["a_manifest_sha256"] == hashlib.sha256((a / "manifest.json").read_bytes()).hexdigest()
    table = hd("compare", a, "--layers", "blocks.0", "--layers", "blocks.1?")
    lines = table.stdout.splitlines()
    assert lines[0] == f"CKA (estimator unbiased) of {a}, 10 inputs:"
    assert [line.split()[1] for line in lines[2:]] == ["blocks.0", "blocks.10", "blocks.11"]
    assert lines[2].split()[2] == "1.000"


def test_compare_two_captures_biased_and_rsa_against_rsatoolbox(
    vits: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = vits
    done = hd("compare", a, b, "--biased", "--layers", "blocks.[05]", "--layers", "blocks.11", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    ba, bb = _blocks(a), _blocks(b)
    names = ["blocks.0", "blocks.5", "blocks.11"]
    assert found["rows"] == found["cols"] == names and found["estimator"] == "biased"
    want = [[cka_numpy(ba[r], bb[c], unbiased=False) for c in names] for r in names]
    assert np.abs(np.array(found["matrix"]) - want).max() < 1e-9
    rdm = hd(
        "compare",
        a,
        b,
        "--metric",
        "rsa",
        "--method",
        "tau-a",
        "--layers",
        "blocks.[05]",
        "-o",
        tmp_path / "r",
        "--json",
    )
    assert rdm.returncode == 0, rdm.stderr
    got = json.loads(rdm.stdout)
    order = json.loads((tmp_path / "r" / "rdm" / "inputs.json").read_text())
    assert [Path(i["path"]).stem for i in order] == sorted(PHOTOS)  # the inputs' order, as captured
    theirs = {}
    for side, blocks, folder in (("a", ba, tmp_path / "r" / "rdm"), ("b", bb, tmp_path / "r" / "rdm" / "b")):
        for name in ("blocks.0", "blocks.5"):
            flat = blocks[name].reshape(len(PHOTOS), -1).astype(np.float64)
            theirs[side, name] = calc_rdm(Dataset(flat), method="correlation")
            saved = np.load(folder / f"{name}.npy")
            assert np.abs(saved - theirs[side, name].get_matrices()[0]).max() < 1e-9
    for i, r in enumerate(("blocks.0", "blocks.5")):
        for j, c in enumerate(("blocks.0", "blocks.5")):
            want_tau = float(rsa_compare(theirs["a", r], theirs["b", c], method="tau-a")[0, 0])
            assert got["matrix"][i][j] == pytest.approx(want_tau, abs=1e-12)


def test_compare_layers_reads_a_pattern_as_capture_l_does(tmp_path: Path) -> None:
    """`*` stays inside one dotted name (`blocks.*` is not `blocks.0.attn.qkv`), `**` crosses them, and
    `model.blocks[1]` is `blocks.1`: the same pattern picks the same tensors in compare as modules in capture
    (before, compare's fnmatch let `*` cross the dots)."""
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in PHOTOS[:5]:
        shutil.copy(SKIMAGE_DATA / f"{name}.png", photos / f"{name}.png")
    out = tmp_path / "vit"
    done = hd(
        "capture",
        *VIT,
        "-l",
        "blocks.0",
        "-l",
        "blocks.0.attn.qkv",
        "-l",
        "blocks.1",
        photos,
        "-o",
        out,
        "-q",
    )
    assert done.returncode == 0, done.stderr
    planned = hd("capture", *VIT, "-l", "blocks.*", photos, "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    in_capture = {m["name"] for m in json.loads(planned.stdout)}
    assert {"blocks.0", "blocks.1"} <= in_capture and "blocks.0.attn.qkv" not in in_capture

    def rows(*specs: str) -> list[str]:
        found = hd("compare", out, *[a for s in specs for a in ("--layers", s)], "--json")
        assert found.returncode == 0, found.stderr
        return list(json.loads(found.stdout)["rows"])

    assert rows("blocks.*") == ["blocks.0", "blocks.1"]
    assert rows("blocks.**") == ["blocks.0", "blocks.0.attn.qkv", "blocks.1"]
    assert rows("model.blocks[1]", "blocks.*.attn.*") == ["blocks.0.attn.qkv", "blocks.1"]
    assert rows("re:qkv$", "blocks.1") == ["blocks.0.attn.qkv", "blocks.1"]
    assert rows("blocks.[1]", "blocks[0]") == ["blocks.0", "blocks.1"]  # `.[1]` a glob's set, `[0]` an index
    unclosed = hd("compare", out, "--layers", "blocks.[0")
    assert unclosed.returncode == 2 and "has an unclosed `[`" in unclosed.stderr
    assert "Traceback" not in unclosed.stderr


def test_compare_refuses_what_it_cannot_compare_rightly(cli, vits: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = vits
    wrong = cli("compare", a, "--layers", "block.0")
    assert wrong.exit_code == 2 and "matches no tensor" in wrong.stderr and "blocks.0" in wrong.stderr
    one_wrong = cli("compare", a, b, "--layers", "blocks.0", "--layers", "blocks.[0")  # not dropped silently
    assert one_wrong.exit_code == 2 and "has an unclosed `[`" in one_wrong.stderr, one_wrong.stderr
    one_wrong = cli("compare", a, b, "--layers", "blocks.0", "--layers", "block.11", "-o", tmp_path / "none")
    assert one_wrong.exit_code == 2 and "`block.11` matches no tensor of" in one_wrong.stderr
    assert "blocks.11" in one_wrong.stderr and not (tmp_path / "none").exists()
    metric = cli("compare", a, "--metric", "cca")
    assert metric.exit_code == 2 and "--metric `cca` is not one of cka, rsa" in metric.stderr
    (tmp_path / "taken" / "rdm").mkdir(parents=True)
    taken = cli("compare", a, "--rdm-only", "--layers", "blocks.0", "-o", tmp_path / "taken")
    assert taken.exit_code == 2 and "is in the way" in taken.stderr
    only = cli("compare", a, "--rdm-only", "--layers", "blocks.0", "-o", tmp_path / "only")
    assert only.exit_code == 0 and sorted(p.name for p in (tmp_path / "only" / "rdm").iterdir()) == [
        "blocks.0.npy", "inputs.json",
    ]  # fmt: skip


# --- --reduce: each tensor pooled to (N, C) first, as capture --reduce pools it --------------------------


@pytest.fixture(scope="module")
def pooled(vits: tuple[Path, Path]) -> dict[str, Path]:
    """The first ViT's captures again with --reduce mean and cls (pooled at hook time, in torch), and a
    resnet18's layer1 and layer2 maps without and with --reduce max."""
    a, _ = vits
    root, photos = a.parent, a.parent / "photos"
    runs = {
        "vit-mean": (*VIT, "-l", "blocks.*", "--reduce", "mean"),
        "vit-cls": (*VIT, "-l", "blocks.*", "--reduce", "cls"),
        "r18": R18,
        "r18-max": (*R18, "--reduce", "max"),
    }  # fmt: skip
    for name, args in runs.items():
        done = hd("capture", *args, photos, "--seed", 0, "-o", root / name, "-q")
        assert done.returncode == 0, done.stderr
    return {name: root / name for name in runs}


def test_compare_reduce_pools_as_capture_reduce_does(
    vits: tuple[Path, Path], pooled: dict[str, Path]
) -> None:
    from hookdump.analysis.pool import reduced
    from hookdump.store.folder.reader import Capture

    a, _ = vits
    for flat, at_hook, how in ((a, pooled["vit-mean"], "mean"), (a, pooled["vit-cls"], "cls"),
                               (pooled["r18"], pooled["r18-max"], "max")):  # fmt: skip
        capture, kept, prefixes = Capture(flat), [], {}
        for name in capture:
            mine = reduced(capture, name, how, kept, prefixes)
            theirs = np.load(at_hook / f"{name}.npy")  # the capture wing's reduce, in torch at hook time
            assert mine is not None and mine.shape == theirs.shape, name
            assert np.allclose(mine, theirs, rtol=1e-5, atol=1e-6), (name, np.abs(mine - theirs).max())
        assert not kept and prefixes == ({f"blocks.{i}": 1 for i in range(12)} if how == "mean" else {})
        done = hd("compare", flat, "--reduce", how, "--json")
        assert done.returncode == 0, done.stderr
        found, same = json.loads(done.stdout), json.loads(hd("compare", at_hook, "--json").stdout)
        assert found["reduce"] == how and found["rows"] == same["rows"]
        assert np.abs(np.array(found["matrix"]) - np.array(same["matrix"])).max() < 1e-5
        # the oracle: numpy's pooling of the files and numpy's CKA
        arrays = {n: np.load(flat / f"{n}.npy").astype(np.float64) for n in found["rows"]}
        by_hand = {
            "mean": lambda x: x[:, 1:].mean(axis=1),  # the class token left out, as timm's avg pool does
            "cls": lambda x: x[:, 0],
            "max": lambda x: x.max(axis=(2, 3)),
        }[how]
        want = [[cka_numpy(by_hand(arrays[r]), by_hand(arrays[c])) for c in arrays] for r in arrays]
        assert np.abs(np.array(found["matrix"]) - want).max() < 1e-9
        if how == "mean":
            assert "--reduce mean left out the first 1 token(s) of blocks.0, blocks.1," in done.stderr
    table = hd("compare", pooled["r18"], "--reduce", "max")
    assert table.stdout.startswith(f"CKA (estimator unbiased, --reduce max) of {pooled['r18']}, 10 inputs:")
    wrong = hd("compare", a, "--reduce", "median")
    assert wrong.returncode == 2 and "--reduce `median` is not one of none, mean, max, cls" in wrong.stderr
