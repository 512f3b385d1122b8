"""Captured tensors to ``.npy`` / ``.pt`` / ``.safetensors`` files and ``manifest.json``, all or nothing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import UsageError
from .recorder import Captured

FORMATS = ("npy", "pt", "safetensors")
MANIFEST = "manifest.json"
SAFETENSORS_FILE = "tensors.safetensors"


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
    if (out / MANIFEST).exists() and not overwrite:
        raise UsageError(
            f"`{out}` already holds a capture ({MANIFEST}).",
            "Pass --overwrite to replace it, or choose another --out.",
        )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _for_saving(tensor: torch.Tensor) -> torch.Tensor:
    """Float tensors are saved as float32 (numpy has no bfloat16); the manifest keeps the original."""
    return tensor.float() if tensor.is_floating_point() else tensor


def write(
    out: Path, captured: list[Captured], formats: tuple[str, ...], header: dict[str, Any]
) -> list[SavedTensor]:
    """Write every file into a scratch folder, move them into ``out``, then write the manifest last."""
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous(out)
    scratch = Path(tempfile.mkdtemp(prefix=".hookdump-partial-", dir=out))
    try:
        saved: list[SavedTensor] = []
        bundle: dict[str, torch.Tensor] = {}
        for item in captured:
            tensor = _for_saving(item.tensor).contiguous()
            for fmt in formats:
                name = SAFETENSORS_FILE if fmt == "safetensors" else f"{item.stem}.{fmt}"
                if fmt == "npy":
                    np.save(scratch / name, tensor.numpy())
                elif fmt == "pt":
                    torch.save(tensor, scratch / name)
                else:
                    bundle[item.stem] = tensor
                saved.append(
                    SavedTensor(
                        layer=item.layer,
                        kind=item.kind,
                        index=item.index,
                        call=item.call,
                        file=name,
                        format=fmt,
                        shape=list(tensor.shape),
                        dtype=_dtype_name(tensor.dtype),
                        source_dtype=_dtype_name(item.tensor.dtype),
                        key=item.stem if fmt == "safetensors" else None,
                    )
                )
        if bundle:
            from safetensors.torch import save_file

            save_file(bundle, str(scratch / SAFETENSORS_FILE))
        for path in scratch.iterdir():
            os.replace(path, out / path.name)
        manifest = {**header, "tensors": [s.as_dict() for s in saved]}
        tmp = scratch / MANIFEST
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, out / MANIFEST)
        return saved
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
