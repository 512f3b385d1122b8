"""--format zarr: ``OUT/tensors.zarr``, one Zarr v3 array per tensor, equal bit for bit to the .npy files,
its axes named for xarray (``input`` shared, the inputs' path, sha256 and label its coordinates), chunked
by the batch (or ``--zarr-chunk``) for dask; read back by ``hookdump.open`` and every command; refused
where it cannot be (bfloat16, a user's folder in the way, no zarr package)."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import forkrun
import numpy as np
import pytest
import xarray as xr
import zarr
from common import SKIMAGE_DATA, paragraph

import hookdump
from hookdump.errors import InputError
from hookdump.store.formats.zarr import ZarrTensor, dimension_names, write_zarr

RESNET = ("-m", "test_resnet", "-l", "conv1", "-l", "layer1", "-l", "layer1.0:add", "--batch-size", "2")
LABELS = {"cat": "chelsea.png", "cup": "coffee.png", "person": "astronaut.png", "rocket": "rocket.jpg"}


def bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five real photos in class folders (their labels: cat, cup, person, rocket, rocket)."""
    root = tmp_path_factory.mktemp("classes")
    for i, (label, name) in enumerate([*LABELS.items(), ("rocket", "camera.png")]):
        (root / label).mkdir(exist_ok=True)
        shutil.copy(SKIMAGE_DATA / name, root / label / f"{i}{Path(name).suffix}")
    return root


def _captured(photos: Path, folder: Path, formats: str) -> Path:
    """The console script's capture of ``photos`` in batches of 2, as ``formats``."""
    out = folder / "out"
    done = forkrun.run(["capture", *RESNET, photos, "--format", formats, "-o", out, "-q"])
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def both(classes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The five photos captured with ``--format npy,zarr``."""
    return _captured(classes, tmp_path_factory.mktemp("both"), "npy,zarr")


@pytest.fixture(scope="module")
def only(classes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same capture in tensors.zarr alone."""
    return _captured(classes, tmp_path_factory.mktemp("only"), "zarr")


def test_the_arrays_equal_the_npy_files_bit_for_bit_with_named_dims_and_the_inputs(both: Path) -> None:
    manifest = json.loads((both / "manifest.json").read_text())
    npy = {e["layer"]: e for e in manifest["tensors"] if e["format"] == "npy"}
    stored = {e["layer"]: e for e in manifest["tensors"] if e["format"] == "zarr"}
    assert sorted(npy) == sorted(stored) == ["conv1", "layer1", "layer1.0:add"]
    group = zarr.open_group(both / "tensors.zarr", mode="r")
    for layer, entry in stored.items():
        assert entry["file"] == "tensors.zarr" and entry["key"] == layer.replace(":", "+")
        for key in ("shape", "dtype", "stats", "layout"):
            assert entry[key] == npy[layer][key], key
        array = group[entry["key"]]
        assert bits(array[:]) == bits(np.load(both / npy[layer]["file"]))
        assert array.attrs["layer"] == layer and array.attrs["kind"] == "output" and array.attrs["call"] == 0
        assert array.attrs["layout"] == "NCHW" and array.attrs["source_dtype"] == "float32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # consolidated metadata: xarray opens it without a warning
        ds = xr.open_zarr(both / "tensors.zarr")
    assert ds["layer1"].dims == ("input", "layer1.channel", "layer1.y", "layer1.x")
    assert ds["layer1.0+add"].dims[0] == "input" and ds["layer1.0+add"].dims[1] == "layer1.0+add.channel"
    assert ds.sizes["conv1.y"] == 80 and ds.sizes["layer1.y"] == 40  # two sizes, two names
    inputs = hookdump.open(both).inputs
    assert list(ds["input"].values) == [r["path"] for r in inputs]
    assert list(ds["input.sha256"].values) == [r["sha256"] for r in inputs]
    assert list(ds["input.label"].values) == ["cat", "cup", "person", "rocket", "rocket"]
    assert {"input", "input.sha256", "input.label"} == set(ds.coords)
    assert ds.attrs["hookdump_version"] == manifest["hookdump_version"]
    assert ds.attrs["model"] == manifest["model"]
    picked = ds["layer1"].sel(input=inputs[2]["path"]).values
    assert bits(picked) == bits(np.load(both / "layer1.npy")[2])
    # dask: chunked by the batch along the inputs, the other axes whole; summed chunk by chunk
    data = ds["layer1"].data
    assert type(data).__module__.startswith("dask") and data.chunks == ((2, 2, 1), (32,), (40,), (40,))
    total = float(data.astype("float64").sum().compute())
    np.testing.assert_allclose(total, np.load(both / "layer1.npy").astype(np.float64).sum(), rtol=1e-12)
    # hookdump.open prefers the memory-mapped .npy
    assert isinstance(hookdump.open(both)["layer1"], np.memmap)


def test_a_zarr_only_capture_reads_back_lazily_and_every_command_reads_it(
    cli, both: Path, only: Path, tmp_path: Path
) -> None:
    assert sorted(p.name for p in only.iterdir()) == ["inputs.parquet", "manifest.json", "tensors.zarr"]
    capture = hookdump.open(only)
    array = capture["layer1"]
    assert isinstance(array, zarr.Array) and array.shape == (5, 32, 40, 40)
    assert bits(array[1:4]) == bits(np.load(both / "layer1.npy")[1:4])
    held, bfloat16 = capture.bits("layer1.0:add")
    assert not bfloat16 and isinstance(held, np.ndarray) and not held.flags.writeable
    assert bits(held) == bits(np.load(both / "layer1.0+add.npy"))
    out = tmp_path / "only"
    shutil.copytree(only, out)  # (top writes its sheets into the folder)
    stats = cli("stats", out)
    assert stats.exit_code == 0 and stats.stdout == cli("stats", both).stdout  # the manifest's numbers
    shown = cli("show", out, "--key", "layer1.0:add", "-o", tmp_path / "add.png")
    assert shown.exit_code == 0 and (tmp_path / "add.png").is_file(), shown.stderr
    zarr_shown = cli("show", out / "tensors.zarr", "--key", "layer1", "-o", tmp_path / "l1.png")
    assert zarr_shown.exit_code == 0 and (tmp_path / "l1.png").is_file(), zarr_shown.stderr
    diff = cli("diff", out, both)
    assert diff.exit_code == 0 and "same: 3 tensor(s)" in diff.stdout, diff.stdout
    compared = [json.loads(cli("compare", side, "--json").stdout) for side in (out, both)]
    assert compared[0]["matrix"] == compared[1]["matrix"] and len(compared[0]["rows"]) == 3
    tops = [cli("top", side, "-l", "layer1", "-k", "2", "--no-png", "--json") for side in (out, both)]
    assert tops[0].exit_code == 0, tops[0].stderr
    assert json.loads(tops[0].stdout)["channels"] == json.loads(tops[1].stdout)["channels"]
    assert cli("top", out, "-l", "layer1", "-k", "2").exit_code == 0 and (out / "top" / "layer1").is_dir()


def test_zarr_chunk_and_a_vit_s_tokens(classes: Path, tmp_path: Path) -> None:
    out = tmp_path / "vit"
    args = ["capture", "-m", "test_vit", "-l", "blocks.0", classes, "--format", "zarr", "--zarr-chunk", "3"]
    done = forkrun.run([*args, "-o", out, "-q"])
    assert done.returncode == 0, done.stderr
    ds = xr.open_zarr(out / "tensors.zarr")
    assert ds["blocks.0"].dims == ("input", "blocks.0.token", "blocks.0.feature")
    assert ds["blocks.0"].data.chunks[0] == (3, 2)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["options"]["zarr_chunk"] == 3 and manifest["tensors"][0]["layout"] == "NLC"
    dry = forkrun.run([*args, "-o", tmp_path / "dry", "--dry-run"])
    assert "tensors.zarr counted uncompressed (Blosc zstd shrinks it), in chunks of 3 input(s)" in dry.stdout
    plain = ["capture", "-m", "test_vit", "-l", "blocks.0", "--random-input", "--zarr-chunk", "3"]
    ignored = forkrun.run([*plain, "-o", tmp_path / "npy"])
    assert "--zarr-chunk 3 is ignored: it chunks tensors.zarr and --format is npy" in ignored.stderr


def test_dimension_names_and_a_windowed_tensor_that_does_not_claim_the_input_axis(tmp_path: Path) -> None:
    assert dimension_names("a", "NHWC", 4) == ["input", "a.y", "a.x", "a.channel"]
    assert dimension_names("a", "NC", 2) == ["input", "a.channel"]
    assert dimension_names("a", "attn", 4) == ["input", "a.head", "a.query", "a.key"]
    assert dimension_names("a", "attn", 5) == ["input", "a.dim1", "a.dim2", "a.dim3", "a.dim4"]
    assert dimension_names("a", None, 1) == ["input"]
    rng = np.random.default_rng(0)
    np.save(tmp_path / "w.npy", rng.standard_normal((3 * 4, 5, 2), dtype=np.float32))  # 4 windows an input
    np.save(tmp_path / "v.npy", np.array([-0.0, 0.0, 1.5], np.float32))
    tensors = [
        ZarrTensor("w", tmp_path / "w.npy", "windows", 4, {"layer": "w"}),
        ZarrTensor("v", tmp_path / "v.npy", None, 1, {}),
    ]
    records = [{"path": f"p{i}.png", "sha256": f"{i:064x}"} for i in range(3)]
    write_zarr(tensors, tmp_path / "t.zarr", 2, {"model": "m"}, records)
    ds = xr.open_zarr(tmp_path / "t.zarr")
    assert ds["w"].dims == ("w.window", "w.token", "w.feature") and ds["w"].data.chunks[0] == (8, 4)
    assert ds["v"].dims == ("input",) and "input.label" not in ds.coords  # no labels: no such array
    assert bits(ds["v"].values) == bits(np.load(tmp_path / "v.npy"))  # -0.0 kept: every chunk written
    # a tensor named as a coordinate: the inputs stay in inputs.parquet, the group has no coordinates
    write_zarr([ZarrTensor("input", tmp_path / "v.npy", None, 1, {})], tmp_path / "u.zarr", 2, {}, records)
    assert list(zarr.open_group(tmp_path / "u.zarr", mode="r").array_keys()) == ["input"]


def test_bfloat16_is_refused_before_any_work(cli, tmp_path: Path) -> None:
    out = tmp_path / "bf16"
    args = ("capture", *RESNET, "--random-input", "--dtype", "bfloat16", "--save-dtype", "keep")
    done = cli(*args, "--format", "zarr", "-o", out)
    assert done.exit_code == 2 and not out.exists()
    paragraph(done.stderr, "cannot write bfloat16 tensors to tensors.zarr: numpy and zarr have no bfloat16",
              "--format pt", "--save-dtype float16")  # fmt: skip
    assert cli(*args, "--format", "zarr", "--save-dtype", "float16", "-o", out, "-q").exit_code == 0


def test_a_users_tensors_zarr_is_refused_and_overwrite_replaces_only_hookdumps(cli, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    (out / "tensors.zarr").mkdir(parents=True)
    args = ("capture", *RESNET, "--random-input", "-o", out, "-q")
    for extra in ((), ("--overwrite",)):
        done = cli(*args, "--format", "npy,zarr", *extra)
        assert done.exit_code == 2, done.stderr
        paragraph(done.stderr, f"`{out / 'tensors.zarr'}` is in the way", "a folder of that name", "Move it")
        assert sorted(p.name for p in out.iterdir()) == ["tensors.zarr"]
    assert cli(*args, "--format", "npy").exit_code == 0  # no zarr: not in its way
    (out / "tensors.zarr").rmdir()
    (out / "tensors.zarr").write_bytes(b"mine")
    done = cli(*args, "--format", "zarr", "--overwrite")
    assert done.exit_code == 2 and "a file of that name" in paragraph(done.stderr)
    (out / "tensors.zarr").unlink()
    # hookdump's own tensors.zarr: replaced whole by --overwrite, removed by one without zarr
    assert cli(*args, "--format", "zarr", "--overwrite").exit_code == 0
    first = bits(zarr.open_group(out / "tensors.zarr", mode="r")["conv1"][:])
    assert cli(*args, "--format", "zarr", "--overwrite", "--seed", "1").exit_code == 0
    assert bits(hookdump.open(out)["conv1"][:]) != first
    assert cli(*args, "--format", "npy", "--overwrite").exit_code == 0
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".zarr") == []
    assert not (out / ".hookdump-partial").exists()


def _edit_entry(out: Path, layer: str, **changes: object) -> None:
    """Change the zarr entry of ``layer`` in ``out``'s manifest, as a hand edit would."""
    manifest = json.loads((out / "manifest.json").read_text())
    next(e for e in manifest["tensors"] if e["layer"] == layer).update(changes)
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (
            lambda o: (o / "tensors.zarr" / "layer1" / "c.1.0.0.0").unlink(),
            "lacks 1 of the 3 chunks of `layer1`",
        ),
        (lambda o: shutil.rmtree(o / "tensors.zarr" / "conv1"), "lacks 3 of the 3 chunks of `conv1`"),
        (lambda o: _edit_entry(o, "conv1", key="nope"), "holds no array `nope`"),
        (
            lambda o: _edit_entry(o, "conv1", shape=[4, 32, 80, 80]),
            "holds `conv1` as [5, 32, 80, 80] float32",
        ),
        (lambda o: shutil.rmtree(o / "tensors.zarr"), "is listed in manifest.json but missing"),
    ],
    ids=["a chunk gone", "an array gone", "another key", "another shape", "the store gone"],
)
def test_a_damaged_store_is_refused_naming_what_it_lacks(only: Path, tmp_path: Path, damage, words) -> None:
    out = tmp_path / "out"
    shutil.copytree(only, out)
    damage(out)
    with pytest.raises(InputError) as refused:
        hookdump.open(out)
    assert words in refused.value.message


def test_without_the_zarr_package_one_paragraph_names_the_extra(
    cli, monkeypatch: pytest.MonkeyPatch, both: Path, only: Path, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "zarr", None)  # as if not installed: `import zarr` raises ImportError
    out = tmp_path / "out"
    done = cli("capture", *RESNET, "--random-input", "--format", "npy,zarr", "-o", out)
    assert done.exit_code == 4 and not out.exists()
    paragraph(done.stderr, "Zarr stores (--format zarr) need the `zarr` package, which is not installed",
              "pip install -e '.[zarr]'", "pip install 'zarr>=3.1'")  # fmt: skip
    stats = cli("stats", only)
    assert stats.exit_code == 4
    paragraph(stats.stderr, "Captures saved as tensors.zarr need the `zarr` package", "zarr extra")
    assert cli("stats", both).exit_code == 0  # the .npy files are read: no zarr needed
