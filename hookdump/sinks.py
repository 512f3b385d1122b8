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

from . import __version__
from .errors import UsageError, check_choice
from .models import ModelSpec, ResolvedName
from .recorder import Captured, Key
from .stream import NpyStream

FORMATS = ("npy", "pt", "safetensors")
MANIFEST = "manifest.json"
SAFETENSORS_FILE = "tensors.safetensors"
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

    def __init__(self, out: Path, formats: tuple[str, ...], save_dtype: str = "float32") -> None:
        self.out = out
        self.formats = formats
        self.save_dtype = save_dtype
        self.streams: dict[Key, NpyStream] = {}
        self.source_dtypes: dict[Key, torch.dtype] = {}

    def __enter__(self) -> Writer:
        self._created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix=".hookdump-partial-", dir=self.out))
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in self.streams.values():
            stream.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self._created and self.out.is_dir() and not any(self.out.iterdir()):
            self.out.rmdir()

    def append(self, batch: dict[Key, torch.Tensor]) -> None:
        """Add one forward pass's tensors, each to its own stream."""
        for key, tensor in batch.items():
            if key not in self.streams:  # a stream keeps its first dtype: one check is enough
                check_save_dtype(self.save_dtype, self.formats, {tensor.dtype})
                self.streams[key] = NpyStream(self.scratch / f"stream-{len(self.streams)}.npy", key[0])
                self.source_dtypes[key] = tensor.dtype
            self.streams[key].append(_for_saving(tensor, self.save_dtype))

    def commit(self, entries: list[Captured], header: dict[str, Any]) -> list[SavedTensor]:
        """Name the files, write the other formats, move everything into ``out``, manifest last."""
        saved: list[SavedTensor] = []
        bundle: dict[str, torch.Tensor] = {}
        for item in entries:
            stream = self.streams[item.key]
            stream.close()
            for fmt in self.formats:
                name = SAFETENSORS_FILE if fmt == "safetensors" else f"{item.stem}.{fmt}"
                if fmt == "pt":
                    torch.save(stream.tensor().clone(), self.scratch / name)
                elif fmt == "safetensors":
                    bundle[item.stem] = stream.tensor()
                saved.append(
                    SavedTensor(
                        layer=item.layer,
                        kind=item.kind,
                        index=item.index,
                        call=item.call,
                        file=name,
                        format=fmt,
                        shape=stream.shape,
                        dtype=_dtype_name(stream.dtype or torch.float32),
                        source_dtype=_dtype_name(self.source_dtypes[item.key]),
                        modified_in_place_after_hook=item.modified_in_place,
                        key=item.stem if fmt == "safetensors" else None,
                    )
                )
            if "npy" in self.formats:
                os.replace(stream.path, self.scratch / f"{item.stem}.npy")
        if bundle:
            from safetensors.torch import save_file

            save_file(bundle, str(self.scratch / SAFETENSORS_FILE))
        _remove_previous(self.out)
        for path in self.scratch.glob("*.*"):
            if not path.name.startswith("stream-"):
                os.replace(path, self.out / path.name)
        manifest = {**header, "tensors": [s.as_dict() for s in saved]}
        tmp = self.scratch / MANIFEST
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


def manifest_header(
    spec: ModelSpec,
    name: ResolvedName,
    device: str,
    dtype: str,
    config: dict[str, Any],
    records: list[dict[str, Any]],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """Everything in manifest.json but the tensors: versions, model, device, transform, inputs."""
    import timm

    return {
        "hookdump_version": __version__,
        "torch_version": torch.__version__,
        "timm_version": timm.__version__,
        "model": {
            "requested": name.requested,
            "timm_name": name.timm_name,
            "checkpoint": str(spec.checkpoint) if spec.checkpoint else None,
            "pretrained": spec.pretrained,
        },
        "device": device,
        "dtype": dtype,
        "transform": {
            "input_size": list(config["input_size"]),
            "mean": list(config["mean"]),
            "std": list(config["std"]),
            "interpolation": config["interpolation"],
            "crop_pct": config["crop_pct"],
        },
        "inputs": records,
        **extra,
    }
