"""The streamed .pt and .safetensors writers, read back by the real torch.load and safetensors."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hookdump.store.formats.npy import HEADER_BYTES, npy_layout
from hookdump.store.formats.npystream import NpyStream
from hookdump.store.formats.pt import write_pt
from hookdump.store.formats.safetensors import write_safetensors

ARRAYS: dict[str, np.ndarray[Any, Any]] = {
    "float32-4d": np.random.default_rng(0).standard_normal((2, 3, 4, 5), dtype=np.float32),
    "float16-1d": np.random.default_rng(1).standard_normal(7).astype(np.float16),
    "int64-2d": np.arange(-6, 6, dtype=np.int64).reshape(3, 4),
    "float32-empty": np.zeros((0, 3, 4), np.float32),
    "uint8-3d": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
    "uint16-2d": np.arange(6, dtype=np.uint16).reshape(2, 3),  # no legacy storage class: _rebuild_tensor_v3
    "bool-1d": np.array([True, False, True]),
    "float64-0d": np.array(3.25),
}


def streamed(path: Path, batches: list[torch.Tensor]) -> Path:
    """An .npy file written the way a capture writes it: batch by batch through NpyStream."""
    stream = NpyStream(path, path.stem)
    for batch in batches:
        stream.append(batch)
    stream.close()
    return path


def bf16_batches() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(n, 3, 5).to(torch.bfloat16) for n in (2, 1, 3)]


@pytest.mark.parametrize("name", ARRAYS)
def test_pt_loads_as_the_npy(tmp_path: Path, name: str) -> None:
    array = ARRAYS[name]
    np.save(tmp_path / "a.npy", array)
    write_pt(tmp_path / "a.npy", tmp_path / "a.pt")
    expected = torch.from_numpy(np.load(tmp_path / "a.npy"))
    for mmap in (False, True):
        loaded = torch.load(tmp_path / "a.pt", weights_only=True, mmap=mmap)
        assert type(loaded) is torch.Tensor and loaded.device.type == "cpu"
        assert (loaded.dtype, loaded.shape) == (expected.dtype, expected.shape)
        assert loaded.is_contiguous() and torch.equal(loaded, expected)
    # the same pickle and the same records as torch.save, each record's data 64-byte aligned
    reference = torch.empty(expected.shape, dtype=expected.dtype).copy_(expected)  # torch's own strides
    torch.save(reference, tmp_path / "b.pt")
    ours, theirs = zipfile.ZipFile(tmp_path / "a.pt"), zipfile.ZipFile(tmp_path / "b.pt")
    assert ours.namelist() == [n.replace("b/", "a/", 1) for n in theirs.namelist()]
    assert ours.read("a/data.pkl") == theirs.read("b/data.pkl")
    assert ours.read("a/data/0") == theirs.read("b/data/0") == array.tobytes()
    raw = (tmp_path / "a.pt").read_bytes()
    for info in ours.infolist():
        name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
        assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0, info.filename
    assert ours.testzip() is None  # CRCs right


def test_pt_from_npy_streams(tmp_path: Path) -> None:
    batches = bf16_batches()
    write_pt(streamed(tmp_path / "bf16.npy", batches), tmp_path / "bf16.pt", bfloat16=True)
    floats = [torch.randn(2, 4, 3, 3), torch.randn(1, 4, 3, 3)]
    write_pt(streamed(tmp_path / "f32.npy", floats), tmp_path / "f32.pt")
    for mmap in (False, True):
        bf16 = torch.load(tmp_path / "bf16.pt", weights_only=True, mmap=mmap)
        assert bf16.dtype == torch.bfloat16 and torch.equal(
            bf16.view(torch.int16), torch.cat(batches).view(torch.int16)
        )
        assert torch.equal(torch.load(tmp_path / "f32.pt", weights_only=True, mmap=mmap), torch.cat(floats))
    assert npy_layout(tmp_path / "bf16.npy") == (np.dtype("<i2"), (6, 3, 5), HEADER_BYTES)


def test_safetensors_single_file(tmp_path: Path) -> None:
    torch.manual_seed(1)
    tensors = {
        "blocks.0": [torch.randn(2, 3, 4), torch.randn(1, 3, 4)],
        "bf16": bf16_batches(),
        "ids": [torch.arange(4).reshape(2, 2)],
        "half": [torch.randn(1, 5).half()],
        "empty": [torch.zeros(0, 7)],
    }
    items = [
        (key, streamed(tmp_path / f"{i}.npy", parts), key == "bf16")
        for i, (key, parts) in enumerate(tensors.items())
    ]
    out = tmp_path / "out"
    out.mkdir()
    assert write_safetensors(items, out) == [(key, "tensors.safetensors") for key in tensors]
    assert sorted(p.name for p in out.iterdir()) == ["tensors.safetensors"]
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "tensors.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    loaded = load_file(out / "tensors.safetensors")
    with safe_open(out / "tensors.safetensors", framework="pt") as file:
        assert list(file.keys()) == sorted(tensors)
        for key, parts in tensors.items():
            expected = torch.cat(parts)
            for got in (loaded[key], file.get_tensor(key)):
                assert got.dtype == expected.dtype and got.shape == expected.shape
                assert (
                    torch.equal(got.view(torch.int16), expected.view(torch.int16))
                    if key == "bf16"
                    else torch.equal(got, expected)
                )


def test_safetensors_bytes_equal_save_file(tmp_path: Path) -> None:
    """save_file sorts by dtype, then by key: for one dtype in key order the files are identical."""
    torch.manual_seed(2)
    tensors = {
        "a.weight": torch.randn(3, 4),
        "b": torch.randn(5),
        "c": torch.zeros(0, 2),
        "ü": torch.randn(1),
    }
    items = []
    for i, (key, tensor) in enumerate(tensors.items()):
        np.save(tmp_path / f"{i}.npy", tensor.numpy())
        items.append((key, tmp_path / f"{i}.npy", False))
    for metadata in (None, {"format": "pt"}):
        write_safetensors(items, tmp_path, metadata=metadata)
        save_file(tensors, tmp_path / "reference.safetensors", metadata=metadata)
        assert (tmp_path / "tensors.safetensors").read_bytes() == (
            tmp_path / "reference.safetensors"
        ).read_bytes()


def test_safetensors_mixed_dtypes_stay_aligned(tmp_path: Path) -> None:
    """safetensors has no gaps between tensors: wider elements go first, so each stays aligned."""
    items = []
    arrays: list[np.ndarray[Any, Any]] = [np.ones(3, np.float16), np.ones(3, np.float32), np.ones(1, np.int8)]
    for i, array in enumerate([*arrays, np.ones(2, np.int64)]):
        np.save(tmp_path / f"{i}.npy", array)
        items.append((f"t{i}", tmp_path / f"{i}.npy", False))
    write_safetensors(items, tmp_path)
    raw = (tmp_path / "tensors.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    assert list(header) == ["t3", "t1", "t0", "t2"]  # stable within one element size
    sizes = {"F16": 2, "F32": 4, "I8": 1, "I64": 8}
    assert all(entry["data_offsets"][0] % sizes[entry["dtype"]] == 0 for entry in header.values())
    assert all(
        torch.equal(t, torch.ones_like(t)) for t in load_file(tmp_path / "tensors.safetensors").values()
    )


def test_safetensors_shards(tmp_path: Path) -> None:
    torch.manual_seed(3)
    tensors = {f"layer.{i}": torch.randn(n, 4) for i, n in enumerate([2, 3, 4, 9, 2, 2])}  # 32..144 bytes
    items = []
    for key, tensor in tensors.items():
        items.append((key, streamed(tmp_path / f"{key}.npy", [tensor[:1], tensor[1:]]), False))
    out = tmp_path / "out"
    out.mkdir()
    files = write_safetensors(items, out, max_shard_bytes=100)
    names = [f"tensors-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    # 32+48 | 64 | 144 alone, over the limit | 32+32
    assert files == list(
        zip(tensors, [names[0], names[0], names[1], names[2], names[3], names[3]], strict=True)
    )
    assert sorted(p.name for p in out.iterdir()) == [*names, "tensors.safetensors.index.json"]
    index = json.loads((out / "tensors.safetensors.index.json").read_text())
    assert index == {
        "metadata": {"total_size": sum(t.numel() * 4 for t in tensors.values())},
        "weight_map": dict(files),
    }
    loaded: dict[str, torch.Tensor] = {}
    for name in names:
        shard = load_file(out / name)
        assert sum(t.numel() * 4 for t in shard.values()) <= 100 or len(shard) == 1
        loaded.update(shard)
    assert loaded.keys() == tensors.keys()
    assert all(torch.equal(loaded[key], tensor) for key, tensor in tensors.items())
    assert write_safetensors(items, tmp_path, max_shard_bytes=10_000) == [
        (k, "tensors.safetensors") for k in tensors
    ]


def test_refuses_what_it_cannot_copy_raw(tmp_path: Path) -> None:
    np.save(tmp_path / "f32.npy", np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="bfloat16 bits must be stored as int16"):
        write_pt(tmp_path / "f32.npy", tmp_path / "x.pt", bfloat16=True)
    assert not (tmp_path / "x.pt").exists()  # no half-written file
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.zeros((2, 3), np.float32)))
    np.save(tmp_path / "big-endian.npy", np.zeros(3, ">f4"))
    for name, message in [("fortran", "Fortran-order"), ("big-endian", "big-endian")]:
        with pytest.raises(ValueError, match=message):
            write_safetensors([("k", tmp_path / f"{name}.npy", False)], tmp_path)
    with pytest.raises(ValueError, match="duplicate safetensors keys"):
        write_safetensors([("k", tmp_path / "f32.npy", False)] * 2, tmp_path)
    (tmp_path / "short.npy").write_bytes((tmp_path / "f32.npy").read_bytes()[:-4])
    with pytest.raises(ValueError, match="truncated"):
        write_pt(tmp_path / "short.npy", tmp_path / "x.pt")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from Linux's /proc")
def test_memory_stays_flat_on_a_300mb_tensor(tmp_path: Path) -> None:
    """The writers stream: a few MB at a time go from the .npy to the output, so converting a ~300 MB
    tensor must not raise the peak memory by anything near its size (torch.save and save_file hold it
    all). Measured in a fresh process, as its high-water mark of resident memory."""
    source = tmp_path / "big.npy"
    stream = NpyStream(source, "big")
    for i in range(30):  # 30 x 10 MiB of float32
        stream.append(torch.full((10, 256, 1024), float(i)))
    stream.close()
    # Not ru_maxrss: Linux carries the parent's high-water mark across fork and exec into the child's
    # ru_maxrss (here pytest's, ~800 MB, above anything the child does). VmHWM is the child's own.
    child = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from hookdump.store.formats.pt import write_pt
        from hookdump.store.formats.safetensors import write_safetensors

        def peak_mb() -> float:  # resident high-water mark; reset first where the kernel allows
            status = Path("/proc/self/status").read_text().split("VmHWM:")[1]
            return int(status.split()[0]) / 1024

        def reset() -> float:
            try:
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                pass
            return peak_mb()

        source, out = Path(sys.argv[1]), Path(sys.argv[2])
        before = reset()
        write_pt(source, out / "big.pt")
        after_pt = peak_mb()
        before_st = reset()
        write_safetensors([("big", source, False)], out)
        print(after_pt - before, peak_mb() - before_st)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", child, str(source), str(tmp_path)], capture_output=True, text=True, check=True
    )
    growth_pt, growth_safetensors = map(float, result.stdout.split())
    assert growth_pt < 64 and growth_safetensors < 64, result.stdout
    loaded = torch.load(tmp_path / "big.pt", mmap=True, weights_only=True)
    assert loaded.shape == (300, 256, 1024) and float(loaded[-1, -1, -1]) == 29.0
    with safe_open(tmp_path / "tensors.safetensors", framework="pt") as file:
        assert float(file.get_slice("big")[295:296, 0, :1]) == 29.0
