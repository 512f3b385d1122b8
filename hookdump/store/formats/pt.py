"""``.pt`` files: written straight from a capture's ``.npy`` stream, a few MB at a time (``torch.save``
holds the whole tensor in memory), as the records ``torch.save`` makes, so that ``torch.load`` (also with
``mmap=True``) returns a plain CPU tensor; and read back memory-mapped."""

from __future__ import annotations

import io
import math
import pickle
import struct
import sys
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from ...errors import InputError
from ...model.checkpoints import tensor_refusal
from .npy import check_bfloat16_bits, copy_bytes, npy_layout

ALIGNMENT = 64  # torch starts each zip record's data on a 64-byte boundary, so torch.load(mmap=True) works

# torch's legacy storage class per dtype (torch.storage._dtype_to_storage_type_map); other dtypes
# (uint16/32/64) are saved as an UntypedStorage and rebuilt by _rebuild_tensor_v3, as torch.save does
_STORAGE_CLASSES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}  # fmt: skip


def write_pt(source: Path, dest: Path, *, bfloat16: bool = False) -> None:
    """Write the ``.npy`` at ``source`` as a ``.pt`` file that ``torch.load`` (also with ``mmap=True``)
    returns as a plain CPU tensor; ``bfloat16``: the file's int16 values are bfloat16 bits."""
    dtype, shape, offset = npy_layout(source)
    if bfloat16:
        check_bfloat16_bits(dtype, source)
    torch_dtype = torch.bfloat16 if bfloat16 else torch.from_numpy(np.empty(0, dtype)).dtype
    archive = dest.stem if dest.name.isascii() and dest.stem and not dest.stem.startswith(".") else "archive"
    try:
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zf:  # torch.save's records, in its order
            _record(zf, f"{archive}/data.pkl", _tensor_pickle(torch_dtype, shape))
            _record(zf, f"{archive}/.format_version", b"1")
            _record(zf, f"{archive}/.storage_alignment", str(ALIGNMENT).encode())
            _record(zf, f"{archive}/byteorder", sys.byteorder.encode())
            with _open_record(zf, f"{archive}/data/0") as out:
                copy_bytes(source, offset, math.prod(shape) * dtype.itemsize, out)
            _record(zf, f"{archive}/version", b"3\n")
            crc = zf.getinfo(f"{archive}/data/0").CRC
            # 40 digits, as torch's writer makes them; torch draws the first 20 at random, these come from the
            # shape, so the same capture gives the same bytes (a resumed run equals an uninterrupted one)
            serial = f"{zlib.crc32(repr((str(torch_dtype), shape)).encode()):020d}{crc:020d}"
            _record(zf, f"{archive}/.data/serialization_id", serial.encode())
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


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


def load_pt(
    file: Path, shape: tuple[int, ...], fix: str, listed_in: str
) -> np.ndarray[Any, Any] | torch.Tensor:
    """A ``.pt`` tensor memory-mapped by torch (``shape``: what ``listed_in`` says it holds, else an
    InputError with ``fix``); a numpy view unless it is bfloat16."""
    try:
        tensor = torch.load(file, mmap=True, weights_only=True, map_location="cpu")
    except Exception as exc:  # unpickling raises many kinds
        raise tensor_refusal(file, exc, fix) from exc
    if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
        raise InputError(f"`{file}` does not hold the {list(shape)} tensor {listed_in} lists.", fix)
    if tensor.dtype == torch.bfloat16:
        return tensor
    array = tensor.numpy()
    array.flags.writeable = False
    return array
