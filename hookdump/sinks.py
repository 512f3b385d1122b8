"""Captured tensors to ``.npy`` / ``.pt`` / ``.safetensors`` files and ``manifest.json``, all or nothing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import UsageError, check_choice
from .formats import write_pt, write_safetensors
from .lock import SCRATCH_PREFIX, OutputLock
from .manifest import MANIFEST
from .records import Captured, Key
from .stream import NpyStream

FORMATS = ("npy", "pt", "safetensors")
SAVE_DTYPES = ("float32", "keep")


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

    def as_dict(self) -> dict[str, Any]:
        entry = dict(vars(self))
        if entry["key"] is None:
            del entry["key"]
        return entry


def parse_formats(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``npy,pt`` -> ``("npy", "pt")``, refusing unknown ones."""
    items = text.split(",") if isinstance(text, str) else [f for t in text for f in t.split(",")]
    formats = tuple(dict.fromkeys(f.strip().lower().lstrip(".") for f in items if f.strip()))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UsageError(
            f"Unknown --format `{','.join(unknown) or text}`.", f"Choose from {', '.join(FORMATS)}."
        )
    return formats


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse, before any work, to mix a new capture into a folder that holds one."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out `{out}` is a file, not a folder.", "Choose another --out.")
    parent = next(p for p in [out, *out.absolute().parents] if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(
            f"--out `{out}` cannot be created: `{parent}` is not a writable folder.", "Choose another --out."
        )
    if (out / MANIFEST).exists() and not overwrite:
        raise UsageError(
            f"`{out}` already holds a capture ({MANIFEST}).",
            "Pass --overwrite to replace it, or choose another --out.",
        )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_save_dtype(save_dtype: str, formats: tuple[str, ...], dtypes: set[torch.dtype]) -> None:
    """``keep`` writes tensors as the model made them; numpy cannot hold bfloat16."""
    check_choice("--save-dtype", save_dtype, SAVE_DTYPES)
    if save_dtype == "keep" and "npy" in formats and torch.bfloat16 in dtypes:
        raise UsageError(
            "--save-dtype keep cannot write bfloat16 tensors to .npy: numpy has no bfloat16.",
            "Use --format pt or --format safetensors (both keep bfloat16), or drop --save-dtype keep"
            " to save float32.",
        )


def _for_saving(tensor: torch.Tensor, save_dtype: str) -> torch.Tensor:
    """Float tensors are saved as float32 unless ``keep``; the manifest records the original dtype."""
    if save_dtype == "keep" or not tensor.is_floating_point():
        return tensor
    return tensor.float()


class Writer:
    """Streams each batch's tensors into a scratch folder inside ``out``; ``commit`` moves the files in
    place and writes the manifest last. Leaving the ``with`` block without a commit (an error) removes the
    scratch folder, and ``out`` too when this writer created it: no half-written output."""

    def __init__(
        self, out: Path, formats: tuple[str, ...], save_dtype: str = "float32", overwrite: bool = False
    ) -> None:
        self.out = out
        self.formats = formats
        self.save_dtype = save_dtype
        self.overwrite = overwrite
        self.streams: dict[Key, NpyStream] = {}
        self.source_dtypes: dict[Key, torch.dtype] = {}
        self.notes: list[str] = []
        self.scratch: Path | None = None

    def __enter__(self) -> Writer:
        """Create ``out``, lock it (one capture at a time), clear a dead run's leftovers, open a scratch."""
        self._created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        self.lock = OutputLock(self.out)
        try:
            self.notes = self.lock.acquire()
            check_out_dir(self.out, self.overwrite)  # again, now that no other run can write here
            self.scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=self.out))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in self.streams.values():
            stream.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.lock.release()
        if self._created and self.out.is_dir() and not any(self.out.iterdir()):
            self.out.rmdir()

    def append(self, batch: dict[Key, torch.Tensor]) -> None:
        """Add one forward pass's tensors, each to its own stream."""
        assert self.scratch is not None, "append inside the with block"
        for key, tensor in batch.items():
            if key not in self.streams:  # a stream keeps its first dtype: one check is enough
                check_save_dtype(self.save_dtype, self.formats, {tensor.dtype})
                self.streams[key] = NpyStream(self.scratch / f"stream-{len(self.streams)}.npy", key[0])
                self.source_dtypes[key] = tensor.dtype
            self.streams[key].append(_for_saving(tensor, self.save_dtype))

    def commit(self, entries: list[Captured], header: dict[str, Any]) -> list[SavedTensor]:
        """Name the files, write the other formats from the streams (never holding a whole tensor), move
        everything into ``out``, manifest last."""
        scratch = self.scratch
        assert scratch is not None, "commit inside the with block"
        streams = [self.streams[item.key] for item in entries]
        for stream in streams:
            stream.close()
        files: dict[tuple[str, str], str] = {}  # (stem, format) -> file name
        for item, stream in zip(entries, streams, strict=True):
            if "pt" in self.formats:
                write_pt(stream.path, scratch / f"{item.stem}.pt", bfloat16=stream.dtype == torch.bfloat16)
            files.update(
                {(item.stem, fmt): f"{item.stem}.{fmt}" for fmt in self.formats if fmt != "safetensors"}
            )
        if "safetensors" in self.formats:
            items = [
                (i.stem, s.path, s.dtype == torch.bfloat16) for i, s in zip(entries, streams, strict=True)
            ]
            for key, name in write_safetensors(items, scratch):
                files[(key, "safetensors")] = name
        saved = [
            SavedTensor(
                layer=item.layer,
                kind=item.kind,
                index=item.index,
                call=item.call,
                file=files[(item.stem, fmt)],
                format=fmt,
                shape=stream.shape,
                dtype=_dtype_name(stream.dtype or torch.float32),
                source_dtype=_dtype_name(self.source_dtypes[item.key]),
                modified_in_place_after_hook=item.modified_in_place,
                key=item.stem if fmt == "safetensors" else None,
            )
            for item, stream in zip(entries, streams, strict=True)
            for fmt in self.formats
        ]
        if "npy" in self.formats:
            for item, stream in zip(entries, streams, strict=True):
                os.replace(stream.path, scratch / f"{item.stem}.npy")
        _remove_previous(self.out)
        for path in scratch.glob("*.*"):
            if not path.name.startswith("stream-"):
                os.replace(path, self.out / path.name)
        manifest = {**header, "tensors": [s.as_dict() for s in saved]}
        tmp = scratch / MANIFEST
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, self.out / MANIFEST)
        return saved


def _remove_previous(out: Path) -> None:
    """With --overwrite: delete the files the old manifest lists, so no stale tensor stays behind."""
    manifest = out / MANIFEST
    if not manifest.exists():
        return
    try:
        old = json.loads(manifest.read_text())
        files = {entry["file"] for entry in old.get("tensors", [])}
    except (ValueError, KeyError, TypeError, AttributeError):
        files = set()
    manifest.unlink()
    for name in files:
        path = out / name
        if path.parent == out and path.is_file():
            path.unlink()
