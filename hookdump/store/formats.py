"""``.pt`` and ``.safetensors`` files written straight from the ``.npy`` files a capture leaves on disk.

Both writers copy the rows a few MB at a time with plain file reads, so memory stays flat however large
the capture is (``torch.save`` and ``safetensors.torch.save_file`` hold every tensor in memory).
"""

from __future__ import annotations

import io
import json
import math
import pickle
import struct
import sys
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import torch

CHUNK_BYTES = 4 << 20  # what one read/write moves
ALIGNMENT = 64  # torch starts each zip record's data on a 64-byte boundary, so torch.load(mmap=True) works
SAFETENSORS_FILE = "tensors.safetensors"
SAFETENSORS_INDEX = SAFETENSORS_FILE + ".index.json"

# torch's legacy storage class per dtype (torch.storage._dtype_to_storage_type_map); other dtypes
# (uint16/32/64) are saved as an UntypedStorage and rebuilt by _rebuild_tensor_v3, as torch.save does
_STORAGE_CLASSES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}  # fmt: skip


def npy_layout(path: Path) -> tuple[np.dtype[Any], tuple[int, ...], int]:
    """The dtype, shape and data offset of a C-order, little-endian ``.npy`` file (checked complete)."""
    with path.open("rb") as file:
        version = np.lib.format.read_magic(file)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"{path}: .npy format version {version} is not supported (1.0 and 2.0 are)")
        two = version == (2, 0)
        read = np.lib.format.read_array_header_2_0 if two else np.lib.format.read_array_header_1_0
        shape, fortran_order, dtype = read(file)
        offset = file.tell()
    if fortran_order and len(shape) > 1:
        raise ValueError(f"{path}: a Fortran-order array; save it with np.ascontiguousarray first")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"{path}: dtype {dtype} is not a plain numeric type")
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder != "little"):
        raise ValueError(f"{path}: big-endian {dtype.str}; .pt and .safetensors are written little-endian")
    if path.stat().st_size < offset + math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{path}: truncated, shorter than its header's {shape} {dtype}")
    return dtype, tuple(shape), offset


def write_pt(source: Path, dest: Path, *, bfloat16: bool = False) -> None:
    """Write the ``.npy`` at ``source`` as a ``.pt`` file that ``torch.load`` (also with ``mmap=True``)
    returns as a plain CPU tensor; ``bfloat16``: the file's int16 values are bfloat16 bits."""
    dtype, shape, offset = npy_layout(source)
    if bfloat16:
        _check_bfloat16_bits(dtype, source)
    torch_dtype = torch.bfloat16 if bfloat16 else torch.from_numpy(np.empty(0, dtype)).dtype
    archive = dest.stem if dest.name.isascii() and dest.stem and not dest.stem.startswith(".") else "archive"
    try:
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zf:  # torch.save's records, in its order
            _record(zf, f"{archive}/data.pkl", _tensor_pickle(torch_dtype, shape))
            _record(zf, f"{archive}/.format_version", b"1")
            _record(zf, f"{archive}/.storage_alignment", str(ALIGNMENT).encode())
            _record(zf, f"{archive}/byteorder", sys.byteorder.encode())
            with _open_record(zf, f"{archive}/data/0") as out:
                _copy(source, offset, math.prod(shape) * dtype.itemsize, out)
            _record(zf, f"{archive}/version", b"3\n")
            crc = zf.getinfo(f"{archive}/data/0").CRC
            # 40 digits, as torch's writer makes them; torch draws the first 20 at random, these come from the
            # shape, so the same capture gives the same bytes (a resumed run equals an uninterrupted one)
            serial = f"{zlib.crc32(repr((str(torch_dtype), shape)).encode()):020d}{crc:020d}"
            _record(zf, f"{archive}/.data/serialization_id", serial.encode())
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def write_safetensors(
    items: list[tuple[str, Path, bool]],
    dest_dir: Path,
    *,
    max_shard_bytes: int | None = None,
    metadata: dict[str, str] | None = None,
) -> list[tuple[str, str]]:
    """Write ``(key, npy path, is_bfloat16)`` items as ``tensors.safetensors`` in ``dest_dir``, or, when
    their data exceeds ``max_shard_bytes``, as ``tensors-00001-of-0000K.safetensors`` shards plus a
    Hugging Face ``tensors.safetensors.index.json``. Returns ``(key, file name)`` in item order.

    Within a file tensors follow item order, except that a larger element size comes first (a stable
    sort): safetensors allows no gaps between tensors, and this keeps each aligned to its element size.
    safetensors' own ``save_file`` sorts by dtype, then by key: for items of one dtype given in key
    order, the two files are the same byte for byte.
    """
    keys = [key for key, _, _ in items]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate safetensors keys: {sorted({k for k in keys if keys.count(k) > 1})}")
    tensors = [_SafeTensor.of(key, path, bf16) for key, path, bf16 in items]
    shards: list[list[_SafeTensor]] = [[]]
    used = 0
    for tensor in tensors:  # a tensor over the limit on its own gets a shard of its own
        if shards[-1] and max_shard_bytes is not None and used + tensor.size > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(tensor)
        used += tensor.size
    count = len(shards)
    names = [f"tensors-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]
    file_of: dict[str, str] = {}
    for name, shard in zip([SAFETENSORS_FILE] if count == 1 else names, shards, strict=True):
        _write_safetensors_file(dest_dir / name, shard, metadata)
        file_of.update((t.key, name) for t in shard)
    if count > 1:  # as transformers writes it
        index = {"metadata": {"total_size": sum(t.size for t in tensors)}, "weight_map": file_of}
        (dest_dir / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return [(key, file_of[key]) for key in keys]


class _SafeTensor(NamedTuple):
    key: str
    path: Path
    dtype: str  # safetensors' name: F32, BF16, I64 ...
    shape: tuple[int, ...]
    offset: int
    itemsize: int
    size: int

    @classmethod
    def of(cls, key: str, path: Path, bfloat16: bool) -> _SafeTensor:
        dtype, shape, offset = npy_layout(path)
        if bfloat16:
            _check_bfloat16_bits(dtype, path)
            name = "BF16"
        elif dtype.kind in "fiub":
            name = "BOOL" if dtype.kind == "b" else f"{dtype.kind.upper()}{dtype.itemsize * 8}"
        else:
            raise ValueError(f"{path}: dtype {dtype} has no safetensors equivalent")
        return cls(key, path, name, shape, offset, dtype.itemsize, math.prod(shape) * dtype.itemsize)


def _write_safetensors_file(path: Path, tensors: list[_SafeTensor], metadata: dict[str, str] | None) -> None:
    """One safetensors file: 8-byte header length, JSON header padded with spaces to 8 bytes, the data."""
    ordered = sorted(tensors, key=lambda t: -t.itemsize)
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    start = 0
    for t in ordered:
        header[t.key] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [start, start + t.size]}
        start += t.size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()  # as serde_json writes
    text += b" " * (-len(text) % 8)
    try:
        with path.open("wb") as out:
            out.write(struct.pack("<Q", len(text)) + text)
            for t in ordered:
                _copy(t.path, t.offset, t.size, out)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _check_bfloat16_bits(dtype: np.dtype[Any], path: Path) -> None:
    """bfloat16 travels in .npy files as its 16 bits, stored as int16."""
    if dtype.kind not in "iu" or dtype.itemsize != 2:
        raise ValueError(f"{path}: bfloat16 bits must be stored as int16, not {dtype}")


def _copy(source: Path, offset: int, size: int, out: IO[bytes]) -> None:
    """Copy ``size`` bytes from ``offset`` of ``source`` into ``out``, one chunk at a time."""
    buffer = memoryview(bytearray(min(CHUNK_BYTES, size)))
    with source.open("rb", buffering=0) as file:
        file.seek(offset)
        while size:
            read = file.readinto(buffer[: min(len(buffer), size)])
            if not read:
                raise ValueError(f"{source} ended {size} bytes early")
            out.write(buffer[:read])
            size -= read


def _open_record(zf: zipfile.ZipFile, name: str) -> IO[bytes]:
    """A stored zip64 entry whose data starts on a 64-byte boundary: like torch's writer, pad the local
    header's extra field with an 'FB' record of 'Z's."""
    assert zf.fp is not None
    fixed = zf.fp.tell() + 30 + len(name.encode()) + 20  # local header + name + zip64 extra (sizes)
    info = zipfile.ZipInfo(name)
    pad = -(fixed + 4) % ALIGNMENT
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
    out = zf.open(info, "w", force_zip64=True)
    if zf.fp.tell() % ALIGNMENT:  # the data starts here
        out.close()
        raise RuntimeError(f"zip record {name} is not {ALIGNMENT}-byte aligned")
    return out


def _record(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    with _open_record(zf, name) as out:
        out.write(data)


class _As:
    """Pickled as ``value``: a persistent id (how torch.save writes a storage), else a reduce tuple."""

    def __init__(self, value: tuple[Any, ...], persistent: bool = False) -> None:
        self.value, self.persistent = value, persistent

    def __reduce__(self) -> tuple[Any, ...]:
        return self.value


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return obj.value if isinstance(obj, _As) and obj.persistent else None


def _tensor_pickle(dtype: torch.dtype, shape: tuple[int, ...]) -> bytes:
    """torch.save's ``data.pkl`` for a contiguous CPU tensor: a ``_rebuild_tensor`` reduce over storage
    ``0``, with torch's contiguous strides (an empty dimension counts as 1)."""
    stride = tuple(math.prod(max(d, 1) for d in shape[i + 1 :]) for i in range(len(shape)))
    args: tuple[Any, ...] = (0, shape, stride, False, OrderedDict())
    numel = math.prod(shape)
    if dtype in _STORAGE_CLASSES:  # a typed storage, sized in elements
        storage = _As(
            ("storage", getattr(torch, _STORAGE_CLASSES[dtype] + "Storage"), "0", "cpu", numel), True
        )
        reduced = _As((torch._utils._rebuild_tensor_v2, (storage, *args)))
    else:  # an untyped one, sized in bytes
        storage = _As(("storage", torch.UntypedStorage, "0", "cpu", numel * dtype.itemsize), True)
        reduced = _As((torch._utils._rebuild_tensor_v3, (storage, *args, dtype)))
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=2).dump(reduced)
    return buffer.getvalue()
