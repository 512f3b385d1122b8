"""``tensors.zarr``: a capture's tensors as one Zarr v3 group, written from the closed ``.npy`` streams a few
chunks at a time (never a whole tensor in memory), Blosc zstd, chunked along the inputs; each array's axes
named (``dimension_names``) so that ``xarray.open_zarr`` gives named dims, ``input`` first, with the inputs'
path, sha256 and label as its coordinates; read back lazily. zarr is optional (hookdump's zarr extra).

The store is whatever ``zarr.open_group`` takes: a local folder's path today, an fsspec store later."""

from __future__ import annotations

import math
import tempfile
import warnings
from collections.abc import Callable
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


class ZarrArray(NamedTuple):
    """One array of the group before any row of it: its name, shape and dtype, layout, rows per input (a
    windowed tensor's windows; else 1) and attributes."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    layout: str | None
    per_input: int
    attributes: dict[str, Any]

    def chunk_rows(self, inputs: int) -> int:
        """The rows of one chunk when a chunk holds ``inputs`` inputs."""
        return max(1, inputs * self.per_input)


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
    arrays = []
    for tensor in tensors:
        dtype, shape, _ = npy_layout(tensor.source)
        arrays.append(
            ZarrArray(tensor.name, shape, dtype, tensor.layout, tensor.per_input, tensor.attributes)
        )
    group = create(store, arrays, chunk_rows, attributes, inputs)
    for tensor, array in zip(tensors, arrays, strict=True):
        if math.prod(array.shape):
            dtype, shape, offset = npy_layout(tensor.source)
            source = np.memmap(tensor.source, dtype, mode="r", offset=offset, shape=shape)
            copy_rows(group[array.name], source, 0, shape[0])
    consolidate(group.store)


def create(
    store: Any,
    arrays: list[ZarrArray],
    chunk_rows: int,
    attributes: dict[str, Any],
    inputs: list[dict[str, Any]] | None = None,
) -> Any:
    """The group ``store`` with ``arrays`` in it, each chunked by ``chunk_rows`` inputs, none of their
    chunks written yet, and the inputs' coordinates (``write_zarr`` says which); the group."""
    zarr = require()
    coordinates = _coordinates(arrays, inputs or [])
    if coordinates:
        attributes = {**attributes, "coordinates": " ".join(n for n in coordinates if n != INPUT)}
    group = zarr.open_group(store, mode="w", zarr_format=3, attributes=attributes)
    for array in arrays:
        group.create_array(
            array.name,
            shape=array.shape,
            chunks=tuple(max(1, n) for n in (array.chunk_rows(chunk_rows), *array.shape[1:])),
            dtype=array.dtype,
            compressors=zarr.codecs.BloscCodec(cname="zstd", clevel=CLEVEL, shuffle="shuffle"),
            dimension_names=dimension_names(array.name, array.layout, len(array.shape), array.per_input),
            attributes=array.attributes,
            chunk_key_encoding={"name": "default", "separator": "."},  # c.0.0.0.0: a flat folder per array
            config={"write_empty_chunks": True},  # a chunk of zeros holds its bytes: -0.0 stays -0.0
        )
    for name, values in coordinates.items():
        integers = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        kind: Any = np.int64 if integers else str
        coordinate = group.create_array(
            name, shape=(len(values),), chunks=(max(len(values), 1),), dtype=kind, dimension_names=[INPUT]
        )
        if values:
            coordinate[:] = np.array(values if integers else [str(v) for v in values], dtype=coordinate.dtype)
    return group


def copy_rows(
    target: Any, source: Any, start: int, end: int, offset: int = 0, seen: Callable[[Any], None] | None = None
) -> None:
    """``source[start - offset : end - offset]`` into rows ``[start, end)`` of the zarr array ``target``, a
    few whole chunks at a time (``start`` on a chunk's edge, ``end`` too or the array's end); ``seen``
    is shown each piece as it passes."""
    rows = int(target.chunks[0])
    row_bytes = math.prod(int(n) for n in target.shape[1:]) * np.dtype(target.dtype).itemsize
    step = rows * max(1, WRITE_BYTES // max(1, rows * row_bytes))
    for first in range(start, end, step):
        last = min(first + step, end)
        piece = np.asarray(source[first - offset : last - offset])
        if seen is not None:
            seen(piece)
        target[first:last] = piece


def consolidate(store: Any) -> None:
    """The group's metadata in one ``zarr.json`` (xarray opens the store from it at once)."""
    with warnings.catch_warnings():  # "not part of the Zarr format 3 specification" yet: zarr, xarray read it
        warnings.simplefilter("ignore")
        require().consolidate_metadata(store)


def _coordinates(arrays: list[ZarrArray], inputs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The inputs' path, sha256 and label, by array name, where every input has one (a label: any); none when
    an array's rows are not one per input, or an array has one of their names."""
    names = {a.name for a in arrays}
    rows = {a.shape[0] for a in arrays if a.per_input == 1}
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
