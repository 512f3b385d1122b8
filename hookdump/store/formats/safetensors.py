"""``.safetensors`` files, no torch: written straight from a capture's ``.npy`` streams (one file, or
Hugging Face's shards with their index), a few MB at a time (``safetensors.torch.save_file`` holds every
tensor in memory); and read back: the JSON header alone, a tensor memory-mapped from its bytes."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from ...errors import InputError
from .npy import check_bfloat16_bits, copy_bytes, npy_layout

SAFETENSORS_FILE = "tensors.safetensors"
SAFETENSORS_INDEX = SAFETENSORS_FILE + ".index.json"
SAFETENSORS_DTYPES = {  # safetensors' name -> the manifest's (torch's) name
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16",
    "U8": "uint8", "BOOL": "bool",
}  # fmt: skip


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
            check_bfloat16_bits(dtype, path)
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
                copy_bytes(t.path, t.offset, t.size, out)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def safetensors_header(file: Path, fix: str) -> tuple[int, dict[str, Any]]:
    """A safetensors file's JSON header, tensors only (``__metadata__`` left out), and where its data
    starts; an InputError with ``fix`` when it is not one. Reads the header only, never the data."""
    try:
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 100 << 20:
                raise ValueError(f"a header of {length} bytes")
            header = json.loads(handle.read(length))
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    except (OSError, ValueError, struct.error, TypeError, AttributeError) as exc:
        raise InputError(f"`{file}` is not a safetensors file: {exc}", fix) from exc
    return 8 + length, tensors


def safetensors_tensor(
    file: Path, start: int, header: dict[str, Any], key: str, fix: str, copy_on_write: bool = False
) -> tuple[np.ndarray[Any, Any], bool]:
    """Tensor ``key`` of a safetensors file memory-mapped from its bytes (``start``, ``header``: from
    :func:`safetensors_header`), and whether it is bfloat16 (held as int16 bits). ``copy_on_write``: writes
    stay in memory (torch warns on a read-only array). An InputError with ``fix`` when the bytes do not
    fit."""
    info = header[key]
    try:
        shape = tuple(int(n) for n in info["shape"])
        dtype = numpy_dtype(info["dtype"])
        begin, end = (int(n) for n in info["data_offsets"])
        if end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"{end - begin} bytes for {list(shape)} {info['dtype']}")
        bfloat16 = info["dtype"] == "BF16"
        if begin == end:
            array = np.empty(shape, dtype)
            array.flags.writeable = copy_on_write and bfloat16
            return array, bfloat16
        mode: Literal["c", "r"] = "c" if copy_on_write and bfloat16 else "r"
        return np.memmap(file, dtype, mode=mode, offset=start + begin, shape=shape), bfloat16
    except (ValueError, OSError, TypeError, KeyError) as exc:
        raise InputError(f"`{file}` is cut short or damaged at `{key}`: {exc}", fix) from exc


def numpy_dtype(name: str) -> np.dtype[Any]:
    """safetensors' dtype name -> the little-endian numpy dtype of its bytes (bfloat16 bits: int16)."""
    return np.dtype("<i2" if name == "BF16" else np.dtype(SAFETENSORS_DTYPES[name]).newbyteorder("<"))
