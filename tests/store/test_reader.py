"""``hookdump.open``: real captures read back memory-mapped, checked against numpy and safetensors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import hookdump
from hookdump.errors import InputError
from hookdump.store.formats.safetensors import SAFETENSORS_INDEX, write_safetensors

MODEL = ("-m", "test_resnet", "-l", "conv1", "-l", "layer1", "-l", "layer2")
STEMS = ["conv1", "layer1", "layer2"]


def _capture(cli, photos: Path, out: Path, *extra: str) -> Path:
    result = cli("capture", *MODEL, photos, "-o", out, *extra)
    assert result.exit_code == 0, result.output
    return out


def _mapped_file(address: int) -> str | None:
    """The file mapped at ``address`` in this process (Linux), else None: the data is not a file's map."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, _, _, _, _, *path = line.split(maxsplit=5)
        low, high = (int(x, 16) for x in span.split("-"))
        if low <= address < high:
            return path[0] if path else None
    return None


def _assert_mapped(value: np.ndarray | torch.Tensor, file: Path) -> None:
    if not Path("/proc/self/maps").exists():
        pytest.skip("no /proc/self/maps to check the memory map against")
    address = value.data_ptr() if isinstance(value, torch.Tensor) else value.ctypes.data
    assert _mapped_file(address) == str(file.resolve())


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_npy_and_safetensors_capture_reads_back_memory_mapped(cli, photos: Path) -> None:
    out = _capture(cli, photos, Path("out"), "--format", "npy,safetensors")
    capture = hookdump.open(out)
    manifest = _manifest(out)
    assert list(capture) == STEMS and len(capture) == 3 and "layer1" in capture and "layer9" not in capture
    assert capture.path == out and capture.manifest == manifest and manifest["inputs"]["count"] == 3
    assert len(capture.inputs) == 3
    assert {e["format"] for e in capture.entries.values()} == {"npy"}  # npy preferred over safetensors
    independent = safetensors.numpy.load_file(out / "tensors.safetensors")
    for stem in STEMS:
        array = capture[stem]
        assert isinstance(array, np.memmap) and not array.flags.writeable
        assert array.shape[0] == 3 and list(array.shape) == capture.entries[stem]["shape"]
        np.testing.assert_array_equal(array, np.load(out / f"{stem}.npy"))
        np.testing.assert_array_equal(array, independent[stem])
        _assert_mapped(array, out / f"{stem}.npy")
        with pytest.raises(ValueError, match="read-only"):
            array[0, 0, 0, 0] = 1.0
    with pytest.raises(KeyError, match="layer1"):
        capture["layr1"]
    assert capture.get("layr1") is None


def test_safetensors_capture_reads_each_key_from_the_file(cli, photos: Path) -> None:
    out = _capture(cli, photos, Path("out"), "--format", "safetensors")
    capture = hookdump.open(out)
    independent = safetensors.numpy.load_file(out / "tensors.safetensors")
    assert list(capture) == STEMS and {e["file"] for e in capture.entries.values()} == {"tensors.safetensors"}
    for stem in STEMS:
        array = capture[stem]
        assert isinstance(array, np.memmap) and not array.flags.writeable and array.dtype == np.float32
        np.testing.assert_array_equal(array, independent[stem])
        _assert_mapped(array, out / "tensors.safetensors")


def test_sharded_safetensors_read_back_as_one_mapping(cli, photos: Path, tmp_path: Path) -> None:
    source = _capture(cli, photos, Path("out"), "--format", "npy")
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    items = [(stem, source / f"{stem}.npy", False) for stem in STEMS]
    files = dict(write_safetensors(items, sharded, max_shard_bytes=300_000))  # each tensor over it: 3 shards
    assert sorted(set(files.values())) == [f"tensors-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert (sharded / SAFETENSORS_INDEX).is_file()
    manifest = _manifest(source)
    manifest["tensors"] = [
        {**entry, "format": "safetensors", "file": files[entry["file"][:-4]], "key": entry["file"][:-4]}
        for entry in manifest["tensors"]
    ]
    (sharded / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(source / "inputs.parquet", sharded)
    capture = hookdump.open(sharded)
    assert list(capture) == STEMS
    for stem in STEMS:
        array = capture[stem]
        assert isinstance(array, np.memmap) and not array.flags.writeable
        np.testing.assert_array_equal(array, np.load(source / f"{stem}.npy"))
        np.testing.assert_array_equal(array, safetensors.numpy.load_file(sharded / files[stem])[stem])
        _assert_mapped(array, sharded / files[stem])


def test_bfloat16_comes_back_as_a_torch_tensor_over_the_map(cli, photos: Path) -> None:
    out = _capture(cli, photos, Path("out"), "--dtype", "bfloat16", "--save-dtype", "keep", "--format",
                   "safetensors")  # fmt: skip
    capture = hookdump.open(out)
    independent = safetensors.torch.load_file(out / "tensors.safetensors")
    for stem in STEMS:
        tensor = capture[stem]
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16
        assert torch.equal(tensor, independent[stem])
        _assert_mapped(tensor, out / "tensors.safetensors")
    before = (out / "tensors.safetensors").read_bytes()
    capture["layer1"].mul_(2)  # copy-on-write: the file stays as captured
    assert (out / "tensors.safetensors").read_bytes() == before


def test_pt_is_read_only_when_no_other_format_holds_the_tensor(cli, photos: Path) -> None:
    out = _capture(cli, photos, Path("out"), "--format", "pt")
    capture = hookdump.open(out)
    for stem in STEMS:
        array = capture[stem]
        assert isinstance(array, np.ndarray) and not array.flags.writeable
        np.testing.assert_array_equal(array, torch.load(out / f"{stem}.pt", weights_only=True).numpy())
        _assert_mapped(array, out / f"{stem}.pt")
    both = _capture(cli, photos, Path("both"), "--format", "pt,safetensors")
    assert {e["format"] for e in hookdump.open(both).entries.values()} == {"safetensors"}


def test_import_hookdump_stays_light() -> None:
    code = "import sys, hookdump; print(sorted({'numpy', 'torch'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_folder_without_a_manifest_is_refused(tmp_path: Path) -> None:
    for folder in (tmp_path, tmp_path / "absent"):
        with pytest.raises(InputError, match=r"no manifest\.json") as info:
            hookdump.open(folder)
        assert info.value.hint and "--out" in info.value.hint


def test_an_incomplete_capture_names_resume(cli, photos: Path) -> None:
    out = _capture(cli, photos, Path("out"), "--format", "npy")
    manifest = _manifest(out)
    for edited in ({**manifest, "complete": False}, {"complete": False, "options": manifest["options"]}):
        (out / "manifest.json").write_text(json.dumps(edited))
        with pytest.raises(InputError, match="incomplete") as info:
            hookdump.open(out)
        assert info.value.hint and "--resume" in info.value.hint


def test_missing_and_truncated_files_are_named(cli, photos: Path) -> None:
    out = _capture(cli, photos, Path("out"), "--format", "npy,safetensors")
    (out / "conv1.npy").unlink()
    with pytest.raises(InputError, match=r"out/conv1\.npy` is listed in manifest.json but missing"):
        hookdump.open(out)
    out = _capture(cli, photos, Path("cut"), "--format", "npy")
    data = (out / "layer1.npy").read_bytes()
    (out / "layer1.npy").write_bytes(data[:-4])
    with pytest.raises(InputError, match=r"cut/layer1\.npy` does not hold the \[3, 32, 40, 40\] float32"):
        hookdump.open(out)
    out = _capture(cli, photos, Path("cut2"), "--format", "safetensors")
    data = (out / "tensors.safetensors").read_bytes()
    (out / "tensors.safetensors").write_bytes(data[:-4])
    with pytest.raises(InputError, match=r"cut2/tensors\.safetensors` has \d+ bytes; its header says"):
        hookdump.open(out)
