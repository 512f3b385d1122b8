"""The writer's last step before its commit: the other formats written from the ``.npy`` streams (never a
whole tensor in memory), each file named, the manifest's entry of each (``SavedTensor``), and the moves from
the scratch folder into ``OUT`` that ``commit`` carries out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..formats.npystream import NpyStream
from ..formats.pt import write_pt
from ..formats.safetensors import SAFETENSORS_INDEX, write_safetensors
from ..formats.zarr import ZARR_STORE, ZarrTensor, write_zarr
from .captured import Captured, Key
from .manifest import entry_stem


@dataclass
class SavedTensor:
    """One file written for one captured tensor (a manifest ``tensors`` entry)."""

    layer: str
    kind: str
    index: str | None
    call: int
    file: str
    format: str
    shape: list[int]
    dtype: str
    source_dtype: str
    modified_in_place_after_hook: bool = False
    key: str | None = None
    stats: dict[str, Any] | None = None  # min, max, mean, std, zeros, nan, inf of the saved values
    layout: str | None = None  # the axes: NCHW, NHWC, NLC, NC, attn, windows (``layouts.layout``)
    windows: dict[str, Any] | None = None  # windowed tensors: rows per image, geometry (``layouts.saved``)
    order: int | None = None  # the forward order: the index of its hook's run in the first forward

    def as_dict(self) -> dict[str, Any]:
        entry = dict(vars(self))
        for name in ("key", "stats", "layout", "windows", "order"):
            if entry[name] is None:
                del entry[name]
        return entry


@dataclass
class Adopted:
    """Files of a run written elsewhere than from its streams (``tensors.zarr`` joined from the run's parts,
    in the scratch folder): their manifest entries, their moves, and each entry's place in the manifest."""

    saved: list[SavedTensor]
    moves: dict[str, str]
    order: list[tuple[str, str]]  # (tensor, format) of every entry, the manifest's order

    def arranged(self, saved: list[SavedTensor]) -> list[SavedTensor]:
        """``saved`` and the adopted entries, in the manifest's order."""
        return sorted(
            [*saved, *self.saved], key=lambda s: self.order.index((entry_stem(s.as_dict()), s.format))
        )


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def saved_files(
    entries: list[Captured],
    streams: list[NpyStream],
    source_dtypes: dict[Key, torch.dtype],
    stats: dict[Key, dict[str, Any] | None],
    formats: tuple[str, ...],
    scratch: Path,
    shard_bytes: int | None,
    zarr_rows: int = 1,
    header: dict[str, Any] | None = None,
) -> tuple[list[SavedTensor], dict[str, str]]:
    """Write the ``.pt`` / ``.safetensors`` files and ``tensors.zarr`` (chunks of ``zarr_rows`` inputs; the
    version, model and inputs of the manifest's ``header`` in it) of the closed ``streams`` into
    ``scratch``; the manifest entry of each file, and the moves (scratch name -> name in ``OUT``)."""
    files: dict[tuple[str, str], str] = {}  # (stem, format) -> file name
    for item, stream in zip(entries, streams, strict=True):
        if "pt" in formats:
            write_pt(stream.path, scratch / f"{item.file_stem}.pt", bfloat16=stream.dtype == torch.bfloat16)
        files.update({(item.stem, f): f"{item.file_stem}.{f}" for f in formats if f in ("npy", "pt")})
    if "safetensors" in formats:
        items = [(i.stem, s.path, s.dtype == torch.bfloat16) for i, s in zip(entries, streams, strict=True)]
        for key, name in write_safetensors(items, scratch, max_shard_bytes=shard_bytes):
            files[(key, "safetensors")] = name
    if "zarr" in formats:
        _write_zarr(entries, streams, source_dtypes, scratch / ZARR_STORE, zarr_rows, header or {})
        files.update({(item.stem, "zarr"): ZARR_STORE for item in entries})
    saved = [
        SavedTensor(
            layer=item.layer,
            kind=item.kind,
            index=item.index,
            call=item.call,
            file=files[(item.stem, fmt)],
            format=fmt,
            shape=stream.shape,
            dtype=dtype_name(stream.dtype or torch.float32),
            source_dtype=dtype_name(source_dtypes[item.key]),
            modified_in_place_after_hook=item.modified_in_place,
            key=item.stem if fmt == "safetensors" else item.file_stem if fmt == "zarr" else None,
            stats=stats[item.key],
            layout=item.layout,
            windows=item.windows,
            order=item.order,
        )
        for item, stream in zip(entries, streams, strict=True)
        for fmt in formats
    ]
    moves = {name: name for (_, fmt), name in files.items() if fmt != "npy"}
    if "npy" in formats:
        moves |= {s.path.name: f"{i.file_stem}.npy" for i, s in zip(entries, streams, strict=True)}
    if (scratch / SAFETENSORS_INDEX).is_file():
        moves[SAFETENSORS_INDEX] = SAFETENSORS_INDEX
    return saved, moves


def _write_zarr(
    entries: list[Captured],
    streams: list[NpyStream],
    source_dtypes: dict[Key, torch.dtype],
    store: Path,
    rows: int,
    header: dict[str, Any],
) -> None:
    """``tensors.zarr``: an array per stream, with its manifest entry's fields as attributes; the group's
    attributes hookdump's version and the model, the inputs' records its coordinates."""
    tensors = []
    for item, stream in zip(entries, streams, strict=True):
        attributes = {
            "tensor": item.stem, "layer": item.layer, "kind": item.kind, "index": item.index,
            "call": item.call, "layout": item.layout, "source_dtype": dtype_name(source_dtypes[item.key]),
            **({"windows": item.windows} if item.windows else {}),
        }  # fmt: skip
        per_input = int((item.windows or {}).get("per_image", 1))
        tensors.append(ZarrTensor(item.file_stem, stream.path, item.layout, per_input, attributes))
    group = {"hookdump_version": header.get("hookdump_version"), "model": header.get("model")}
    records = header.get("inputs")
    write_zarr(tensors, store, rows, group, records if isinstance(records, list) else None)
