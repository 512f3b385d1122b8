"""A finished ``.npy`` file read as bytes, no torch: its layout (dtype, shape, where the data starts), its
rows copied a few MB at a time, and bfloat16 (which numpy has not) held as its 16 bits and widened exactly.
The ``.pt`` and ``.safetensors`` writers read the streams' files through it."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import IO, Any

import numpy as np

CHUNK_BYTES = 4 << 20  # what one read/write moves
HEADER_BYTES = (
    512  # a stream's header: magic, version, length and the padded dict, a multiple of 64 as numpy wants
)


def itemsize(dtype: str) -> int:
    """The bytes of one element of a dtype as the manifest names it (``bfloat16``, ``float32``)."""
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


def npy_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype[Any], int]:
    """A ``.npy`` file's header (format 1.0 or 2.0): shape, Fortran order, dtype, and where its data
    starts; a ValueError (or OSError, EOFError) when it is not one."""
    with path.open("rb") as file:
        version = np.lib.format.read_magic(file)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version} (1.0 and 2.0 are read)")
        two = version == (2, 0)
        read = np.lib.format.read_array_header_2_0 if two else np.lib.format.read_array_header_1_0
        shape, fortran_order, dtype = read(file)
        return tuple(shape), bool(fortran_order), dtype, file.tell()


def npy_layout(path: Path) -> tuple[np.dtype[Any], tuple[int, ...], int]:
    """The dtype, shape and data offset of a C-order, little-endian ``.npy`` file (checked complete)."""
    try:
        shape, fortran_order, dtype, offset = npy_header(path)
    except ValueError as exc:
        raise ValueError(f"{path}: .npy {exc}") from exc
    if fortran_order and len(shape) > 1:
        raise ValueError(f"{path}: a Fortran-order array; save it with np.ascontiguousarray first")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"{path}: dtype {dtype} is not a plain numeric type")
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder != "little"):
        raise ValueError(f"{path}: big-endian {dtype.str}; .pt and .safetensors are written little-endian")
    if path.stat().st_size < offset + math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{path}: truncated, shorter than its header's {shape} {dtype}")
    return dtype, tuple(shape), offset


def check_bfloat16_bits(dtype: np.dtype[Any], path: Path) -> None:
    """bfloat16 travels in .npy files as its 16 bits, stored as int16."""
    if dtype.kind not in "iu" or dtype.itemsize != 2:
        raise ValueError(f"{path}: bfloat16 bits must be stored as int16, not {dtype}")


def copy_bytes(source: Path, offset: int, size: int, out: IO[bytes]) -> None:
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


def floats(chunk: np.ndarray[Any, Any], bfloat16: bool = False) -> np.ndarray[Any, Any]:
    """A chunk of what :meth:`Capture.bits` gave as float64 values: bfloat16 bits widened exactly (no torch),
    any other dtype as numpy converts it. For reading a tensor piece by piece (``hookdump diff``)."""
    if bfloat16:
        return (chunk.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.asarray(chunk, dtype=np.float64)
