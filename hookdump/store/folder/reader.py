"""A capture folder read back as a mapping of tensor name to a memory-mapped array: ``hookdump.open(OUT)``.

The same whether the run wrote ``.npy`` files, one ``tensors.safetensors``, safetensors shards or
``tensors.zarr``; nothing is loaded whole. No torch import unless a tensor needs it (bfloat16, or a
``.pt``-only capture); zarr only for a tensor saved in ``tensors.zarr`` alone.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ...errors import InputError, did_you_mean
from ...urls import is_url
from ..formats.npy import npy_header
from ..formats.safetensors import SAFETENSORS_DTYPES, numpy_dtype, safetensors_header, safetensors_tensor
from ..formats.zarr import array_problem, decoded, open_group
from . import inputtable
from .manifest import MANIFEST, entry_stem, inside
from .remoteread import local

if TYPE_CHECKING:
    import torch
    import zarr

#: a torch.Tensor only for bfloat16 (and .pt), a zarr.Array for a tensor saved in tensors.zarr alone
Array: TypeAlias = "np.ndarray[Any, Any] | torch.Tensor | zarr.Array[Any]"

_PREFERENCE = {"npy": 0, "safetensors": 1, "pt": 2, "zarr": 3}  # the first memory-mappable format wins
_REDO = "Capture it again (hookdump capture ... --overwrite), or restore the file."


class Capture(Mapping[str, Array]):
    """A finished capture: ``capture["layer1"]`` is a read-only ``np.memmap`` of ``OUT/layer1.npy`` (or of
    that key's bytes in a safetensors file or shard), batch first.

    Keys are the tensor names (file stems: ``layer1``, ``blocks.0.attn@1``, ``head.fc.in0``) in manifest
    order; ``.manifest`` is manifest.json, ``.inputs`` its images, ``.entries[key]`` the manifest entry read.
    bfloat16 tensors (numpy has none) come back as ``torch.bfloat16`` tensors over a copy-on-write map of
    the file (writes stay in memory); a tensor saved only as ``.pt`` comes from ``torch.load(mmap=True)``;
    one saved only in ``tensors.zarr`` is its ``zarr.Array``, read-only and lazy (a slice reads the chunks
    it needs, as numpy; ``bits`` decodes it whole into a memory-mapped temporary file).
    """

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.path = local(str(out))  # a URL: its local copy (``remoteread``)
        self.url = str(out) if is_url(str(out)) else None
        self.manifest = finished_manifest(self.path)
        listed = [e for e in self.manifest.get("tensors") or [] if isinstance(e, dict)]
        for entry in listed:
            file = inside(self.path, entry.get("file"))
            if not (file.is_dir() if entry.get("format") == "zarr" else file.is_file()):
                raise InputError(f"`{file}` is listed in {MANIFEST} but missing.", _REDO)
        chosen: dict[str, dict[str, Any]] = {}
        for entry in listed:
            if entry.get("format") not in _PREFERENCE:
                continue
            key = entry_stem(entry)
            if key not in chosen or _PREFERENCE[entry["format"]] < _PREFERENCE[chosen[key]["format"]]:
                chosen[key] = entry  # insertion order = first appearance: manifest order
        self.entries: dict[str, dict[str, Any]] = chosen
        self._headers: dict[str, tuple[int, dict[str, Any]]] = {}  # safetensors file -> (data start, header)
        self._groups: dict[str, Any] = {}  # tensors.zarr -> its zarr group, opened once
        for key, entry in chosen.items():
            self._check(key, entry)

    @functools.cached_property
    def inputs(self) -> list[dict[str, Any]]:
        """The inputs' records (read from ``inputs.parquet`` when first asked for, or the manifest's list)."""
        return inputtable.records(self.path, self.manifest.get("inputs"))

    @property
    def inputs_table(self) -> Any:
        """The inputs as a table (pyarrow: ``.to_pandas()``; the data extra): ``row``, ``source``, ``key``,
        ``label``, ``sha256``, ``width``, ``height``, ``mode``, ``record``; to group rows by label, say."""
        return inputtable.table(self.path, self.manifest.get("inputs"))

    def __getitem__(self, key: str) -> Array:
        """The tensor ``key``, memory-mapped (a KeyError names the closest keys)."""
        entry = self.entries.get(key)
        if entry is None:
            raise KeyError(f"{key!r} is not in {self.path}. {did_you_mean(key, list(self.entries))}".strip())
        file = self.path / entry["file"]
        shape = tuple(entry["shape"])
        if entry["format"] == "npy":
            array: np.ndarray[Any, Any] = np.load(file, mmap_mode="r", allow_pickle=False)
            return array
        if entry["format"] == "pt":
            from ..formats import pt  # for speed: torch only for a .pt-only capture

            return pt.load_pt(file, shape, _REDO, MANIFEST)
        if entry["format"] == "zarr":
            zarr_array: zarr.Array[Any] = self._group(entry["file"])[entry["key"]]
            return zarr_array
        headers = self._headers[entry["file"]]
        array, bfloat16 = safetensors_tensor(file, *headers, key, _REDO, copy_on_write=True)
        if not bfloat16:
            return array
        import torch  # for speed: torch only for bfloat16, which numpy cannot hold

        return torch.from_numpy(array).view(torch.bfloat16)

    def bits(self, key: str) -> tuple[np.ndarray[Any, Any], bool]:
        """The tensor ``key`` as numpy holds it, and whether it is bfloat16 (then its uint16 bits): no torch
        but for a ``.pt``-only capture. What ``show`` draws from."""
        entry = self.entries[key]
        if entry["format"] == "safetensors":
            array, bfloat16 = safetensors_tensor(
                self.path / entry["file"], *self._headers[entry["file"]], key, _REDO
            )
            return (array.view(np.uint16) if bfloat16 else array), bfloat16
        if entry["format"] == "zarr":  # (never bfloat16: refused at capture)
            return decoded(self[key]), False
        value = self[key]
        if isinstance(value, np.ndarray):
            return value, False
        import torch  # for speed: only a bfloat16 tensor of a .pt-only capture comes here

        assert isinstance(value, torch.Tensor)  # (a zarr array was decoded above)
        return value.view(torch.int16).numpy().view(np.uint16), True

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"Capture({str(self.path)!r}, {len(self)} tensors)"

    def _check(self, key: str, entry: dict[str, Any]) -> None:
        """The file holds what the manifest says, with the bytes for it: else an InputError naming it."""
        file = self.path / entry["file"]
        shape = [int(n) for n in entry.get("shape", [])]
        if entry["format"] == "npy":
            try:
                got, fortran, dtype, offset = npy_header(file)
            except (OSError, ValueError, EOFError) as exc:
                raise InputError(f"`{file}` is not a .npy file numpy can read: {exc}", _REDO) from exc
            size = offset + math.prod(got) * dtype.itemsize
            bad = dtype.name != entry.get("dtype", dtype.name) or (fortran and len(got) > 1)
            if list(got) != shape or bad or file.stat().st_size != size:
                raise InputError(
                    f"`{file}` does not hold the {shape} {entry.get('dtype')} tensor {MANIFEST} lists: its"
                    f" header says {list(got)} {dtype}, in {size} bytes; the file has {file.stat().st_size}.",
                    _REDO,
                )
        elif entry["format"] == "safetensors":
            header = self._header(entry["file"])[1]
            info = header.get(key)
            if not isinstance(info, dict) or info.get("dtype") not in SAFETENSORS_DTYPES:
                raise InputError(f"`{file}` holds no tensor `{key}` that {MANIFEST} lists.", _REDO)
            begin, end = info["data_offsets"]
            itemsize = numpy_dtype(info["dtype"]).itemsize
            bad = SAFETENSORS_DTYPES[info["dtype"]] != entry.get("dtype", SAFETENSORS_DTYPES[info["dtype"]])
            if bad or list(info["shape"]) != shape or end - begin != math.prod(shape) * itemsize:
                raise InputError(
                    f"`{file}` holds `{key}` as {info['shape']} {info['dtype']} ({end - begin} bytes), not"
                    f" the {shape} {entry.get('dtype')} tensor {MANIFEST} lists.",
                    _REDO,
                )
        elif entry["format"] == "zarr":
            problem = array_problem(
                self._group(entry["file"]), str(entry.get("key")), shape, entry.get("dtype")
            )
            if problem is not None:
                raise InputError(
                    f"`{file}` {problem}, not the {shape} {entry.get('dtype')} tensor {MANIFEST} lists.",
                    _REDO,
                )

    def _group(self, name: str) -> Any:
        """``tensors.zarr``'s group (opened once), read-only."""
        if name not in self._groups:
            self._groups[name] = open_group(self.path / name, f"Captures saved as {name}")
        return self._groups[name]

    def _header(self, name: str) -> tuple[int, dict[str, Any]]:
        """A safetensors file's JSON header (parsed once) and where its data starts; checks the file size."""
        if name not in self._headers:
            file = self.path / name
            start, header = safetensors_header(file, _REDO)
            try:
                end = max((v["data_offsets"][1] for v in header.values()), default=0)
            except (KeyError, TypeError, IndexError) as exc:
                raise InputError(f"`{file}` is not a safetensors file: {exc}", _REDO) from exc
            if file.stat().st_size != start + end:
                raise InputError(
                    f"`{file}` has {file.stat().st_size} bytes; its header says"
                    f" {start + end}: it was cut short or changed.",
                    _REDO,
                )
            self._headers[name] = (start, header)
        return self._headers[name]


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The folder's manifest.json as it is (finished or not), or None when absent or unreadable: for the
    checks before a run writes there, and for show's look at a loose file beside one."""
    try:
        data = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def entry_of(manifest: dict[str, Any] | None, file: str, key: str | None = None) -> dict[str, Any] | None:
    """The entry of ``manifest`` that lists ``file`` (and ``key`` in a safetensors file), or None."""
    for entry in (manifest or {}).get("tensors") or []:
        if isinstance(entry, dict) and entry.get("file") == file and entry.get("key") == key:
            return entry
    return None


def finished_manifest(path: Path) -> dict[str, Any]:
    """manifest.json of a finished capture, else an InputError with the fix."""
    if not (path / MANIFEST).is_file():
        raise InputError(
            f"`{path}` holds no {MANIFEST}: it is not a finished hookdump capture.",
            "Pass the --out folder of a `hookdump capture` run.",
        )
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"`{path / MANIFEST}` is not readable JSON: {exc}", _REDO) from exc
    if isinstance(manifest, dict) and manifest.get("complete", True) is not True:
        raise InputError(
            f"`{path}` holds an incomplete capture ({MANIFEST} says complete: false).",
            "Finish it: run the same `hookdump capture` command again with --resume.",
        )
    if not isinstance(manifest, dict) or not isinstance(manifest.get("tensors"), list):
        raise InputError(f"`{path / MANIFEST}` is not a hookdump manifest (no `tensors` list).", _REDO)
    return manifest
