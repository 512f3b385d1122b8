"""``tensors.zarr``: a capture's tensors as one Zarr v3 group, written from the closed ``.npy`` streams a few
chunks at a time (never a whole tensor in memory), Blosc zstd, chunked along the inputs; each array's axes
named (``dimension_names``) so that ``xarray.open_zarr`` gives named dims, ``input`` first, with the inputs'
path, sha256 and label as its coordinates; read back lazily. zarr is optional (hookdump's zarr extra).

The store is whatever ``zarr.open_group`` takes: a local folder's path today, an fsspec store later."""

from __future__ import annotations

import math
import tempfile
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...errors import InputError
from ...model.extras import need
from .npy import npy_layout

ZARR_STORE = "tensors.zarr"
INPUT = "input"  # the axis of the inputs, one row each: the same axis in every array that has it
COORDINATES = {"path": INPUT, "sha256": f"{INPUT}.sha256", "label": f"{INPUT}.label"}  # record key -> array
CLEVEL = 1  # zstd's fastest level: about as small as 3 or 5 on activations (byte-shuffled), 2-4x faster
WRITE_BYTES = 16 << 20  # what one write hands zarr (whole chunks, compressed side by side)
_AXES = {  # a layout's axes after the first, by name (``model/layouts.py``); another rank: dim1, dim2, ...
    "NCHW": ("channel", "y", "x"), "NHWC": ("y", "x", "channel"), "NLC": ("token", "feature"),
    "NCL": ("channel", "token"), "NC": ("channel",), "attn": ("head", "query", "key"),
    "windows": ("token", "feature"),
}  # fmt: skip


class ZarrTensor(NamedTuple):
    """One array of the group: its name (the tensor's, file-safe), the finished ``.npy`` it is copied from,
    its layout, its rows per input (a windowed tensor's windows; else 1) and its attributes."""

    name: str
    source: Path
    layout: str | None
    per_input: int
    attributes: dict[str, Any]


def require(needs: str = "Zarr stores (--format zarr)") -> Any:
    """The ``zarr`` package (3.1 or later), or one error paragraph naming the extra that installs it."""
    zarr = need("zarr", needs, "zarr", "zarr", "'zarr>=3.1'")
    if int(str(zarr.__version__).split(".")[0]) < 3:
        raise InputError(
            f"{needs} need zarr 3.1 or later (Zarr v3); zarr {zarr.__version__} is installed.",
            "Install hookdump's zarr extra: pip install -e '.[zarr]' (or pip install 'zarr>=3.1').",
        )
    return zarr


def dimension_names(name: str, layout: str | None, ndim: int, per_input: int = 1) -> list[str]:
    """Each axis's name: ``input`` for the first (a windowed tensor's rows are ``<name>.window``: several to
    an input), then the layout's (``channel``, ``y``, ``x``; ``token``, ``feature``; else ``dim1``...),
    prefixed by the array's name so that two arrays never share an axis of another size."""
    rest = _AXES.get(layout or "", ())
    if len(rest) != ndim - 1:
        rest = tuple(f"dim{i}" for i in range(1, ndim))
    first = INPUT if per_input == 1 else f"{name}.window"
    return [first, *(f"{name}.{axis}" for axis in rest)][:ndim]


def write_zarr(
    tensors: list[ZarrTensor],
    store: Any,
    chunk_rows: int,
    attributes: dict[str, Any],
    inputs: list[dict[str, Any]] | None = None,
) -> None:
    """Write ``tensors`` as the Zarr v3 group ``store`` (a path or a zarr store), each chunked by
    ``chunk_rows`` inputs along its first axis, the other axes whole; ``attributes``: the group's;
    ``inputs``: the inputs' records, whose path, sha256 and label become 1-D arrays along ``input`` (the
    coordinates xarray shows), when there is one per row. Metadata consolidated (xarray opens it at once)."""
    zarr = require()
    coordinates = _coordinates(tensors, inputs or [])
    if coordinates:
        attributes = {**attributes, "coordinates": " ".join(n for n in coordinates if n != INPUT)}
    group = zarr.open_group(store, mode="w", zarr_format=3, attributes=attributes)
    for tensor in tensors:
        _write_array(zarr, group, tensor, chunk_rows)
    for name, values in coordinates.items():
        integers = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        kind: Any = np.int64 if integers else str
        array = group.create_array(
            name, shape=(len(values),), chunks=(max(len(values), 1),), dtype=kind, dimension_names=[INPUT]
        )
        if values:
            array[:] = np.array(values if integers else [str(v) for v in values], dtype=array.dtype)
    with (
        warnings.catch_warnings()
    ):  # "not part of the Zarr format 3 specification" yet: zarr and xarray read it
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(group.store)


def _coordinates(tensors: list[ZarrTensor], inputs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The inputs' path, sha256 and label, by array name, where every input has one (a label: any); none when
    a tensor's rows are not one per input, or a tensor has one of their names."""
    names = {t.name for t in tensors}
    rows = {npy_layout(t.source)[1][0] for t in tensors if t.per_input == 1}
    if not inputs or rows - {len(inputs)} or names & set(COORDINATES.values()):
        return {}
    found: dict[str, list[Any]] = {}
    for key, name in COORDINATES.items():
        values = [record.get(key) for record in inputs]
        if key == "label" and any(v is not None for v in values):
            found[name] = ["" if v is None else v for v in values]
        elif all(isinstance(v, str) for v in values):
            found[name] = values
    return found if INPUT in found else {}


def _write_array(zarr: Any, group: Any, tensor: ZarrTensor, chunk_rows: int) -> None:
    """One array, copied from its ``.npy`` a few chunks at a time; every chunk written (also one of zeros,
    so that each holds its bytes: ``-0.0`` stays ``-0.0``)."""
    dtype, shape, offset = npy_layout(tensor.source)
    rows = max(1, chunk_rows * tensor.per_input)
    array = group.create_array(
        tensor.name,
        shape=shape,
        chunks=tuple(max(1, n) for n in (rows, *shape[1:])),
        dtype=dtype,
        compressors=zarr.codecs.BloscCodec(cname="zstd", clevel=CLEVEL, shuffle="shuffle"),
        dimension_names=dimension_names(tensor.name, tensor.layout, len(shape), tensor.per_input),
        attributes=tensor.attributes,
        chunk_key_encoding={"name": "default", "separator": "."},  # c.0.0.0.0: a flat folder per array
        config={"write_empty_chunks": True},
    )
    if math.prod(shape) == 0:
        return
    rows_bytes = rows * math.prod(shape[1:]) * dtype.itemsize
    step = rows * max(1, WRITE_BYTES // rows_bytes)
    source = np.memmap(tensor.source, dtype, mode="r", offset=offset, shape=shape)
    for start in range(0, shape[0], step):
        array[start : start + step] = source[start : start + step]


def open_group(store: Any, needs: str) -> Any:
    """The group ``store`` (a path or a zarr store), read-only, from its consolidated metadata."""
    return require(needs).open_group(store, mode="r", zarr_format=3)


def array_problem(group: Any, key: str, shape: list[int], dtype: str | None) -> str | None:
    """Why the group holds no array ``key`` of ``shape`` and ``dtype`` with every chunk there, or None."""
    if key not in group or not hasattr(group[key], "nchunks"):
        return f"holds no array `{key}`"
    array = group[key]
    got_shape, got_dtype = list(array.shape), np.dtype(array.dtype).name
    if got_shape != shape or got_dtype != (dtype or got_dtype):
        return f"holds `{key}` as {got_shape} {got_dtype}"
    missing = array.nchunks - array.nchunks_initialized
    if missing:
        return f"lacks {missing} of the {array.nchunks} chunks of `{key}` (cut short, or copied in part)"
    return None


def decoded(array: Any) -> np.ndarray[Any, Any]:
    """The whole of a zarr array as a read-only numpy array, decoded a few chunks at a time into a temporary
    file (``TMPDIR``, gone when the array is) and memory-mapped: never in memory whole."""
    shape, dtype = tuple(int(n) for n in array.shape), np.dtype(array.dtype)
    if math.prod(shape) == 0:
        empty = np.empty(shape, dtype)
        empty.flags.writeable = False
        return empty
    rows = int(array.chunks[0])
    step = rows * max(1, WRITE_BYTES // max(1, rows * math.prod(shape[1:]) * dtype.itemsize))
    with tempfile.TemporaryFile(prefix="hookdump-zarr-") as file:
        file.truncate(math.prod(shape) * dtype.itemsize)
        out = np.memmap(file, dtype, mode="r+", shape=shape)
        for start in range(0, shape[0], step):
            out[start : start + step] = array[start : start + step]
        out.flush()
    out.flags.writeable = False
    return out
