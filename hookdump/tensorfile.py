"""Read one captured tensor back: a ``.npy`` / ``.pt`` file, a key of a ``.safetensors`` file, or a name in
a capture folder, with its ``manifest.json`` entry when the file sits in a capture folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import HookdumpError, InputError, UsageError, did_you_mean
from .manifest import entry_stem

SUFFIXES = (".npy", ".pt", ".pth", ".safetensors")
_WHAT = "Pass a .npy, .pt or .safetensors file that `hookdump capture` wrote, or a capture folder with --key."


@dataclass
class Loaded:
    """A tensor read from disk, where it came from, and what the capture's manifest says about it."""

    path: Path
    key: str | None
    tensor: torch.Tensor
    entry: dict[str, Any] | None = None
    manifest: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        """The layer (and kind) from the manifest, else the safetensors key or the file's stem."""
        if self.entry:
            kind = self.entry.get("kind", "output")
            index = self.entry.get("index")
            call = self.entry.get("call", 0)
            layer = str(self.entry.get("layer")) + (f"@{call}" if call else "")
            return f"{layer} ({kind}{'' if index is None else ' ' + str(index)})"
        return self.key or self.path.stem

    @property
    def source(self) -> str:
        return f"{self.path}[{self.key}]" if self.key else str(self.path)


def load(path: Path, key: str | None = None) -> Loaded:
    """The tensor in ``path`` (``key`` picks one in a safetensors file or a capture folder)."""
    if not path.exists():
        raise InputError(f"`{path}` does not exist.", _WHAT)
    if path.is_dir():
        path, key = _in_folder(path, key)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"`{path}` is not a tensor file: show reads .npy, .pt and .safetensors.", _WHAT)
    if key is not None and suffix != ".safetensors":
        raise UsageError(
            f"--key is for .safetensors files and capture folders, not `{path.name}`.", "Drop --key."
        )
    if suffix == ".safetensors":
        key, tensor = _read_safetensors(path, key)
    else:
        tensor = _read_npy(path) if suffix == ".npy" else _read_pt(path)
    manifest = _manifest(path.parent)
    return Loaded(path, key, tensor, _entry(manifest, path.name, key), manifest)


def _in_folder(folder: Path, key: str | None) -> tuple[Path, str | None]:
    """A capture folder and a tensor name (file stem or safetensors key) -> the file and its key."""
    manifest = _manifest(folder)
    if manifest is None:
        raise InputError(f"`{folder}` is a folder without a readable manifest.json.", _WHAT)
    files: dict[str, tuple[str, str | None]] = {}
    order = {"npy": 0, "pt": 1, "safetensors": 2}
    for entry in sorted(manifest.get("tensors", []), key=lambda e: order.get(e.get("format"), 3)):
        files.setdefault(entry_stem(entry), (entry["file"], entry.get("key")))
    key = _pick(key, list(files), f"`{folder}`")
    file, inner = files[key]
    return folder / file, inner


def _read_npy(path: Path) -> torch.Tensor:
    import numpy as np

    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"`{path}` is not a .npy file numpy can read: {exc}", _WHAT) from exc
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        raise InputError(f"`{path}` does not hold a numeric array.", _WHAT)
    return torch.from_numpy(array.astype(np.float32))


def _read_pt(path: Path) -> torch.Tensor:
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling raises many kinds
        raise InputError(f"`{path}` is not a tensor file torch.load can read: {exc}", _WHAT) from exc
    if not isinstance(value, torch.Tensor):
        raise InputError(f"`{path}` holds a {type(value).__name__}, not a tensor.", _WHAT)
    return value


def _read_safetensors(path: Path, key: str | None) -> tuple[str, torch.Tensor]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            keys = list(handle.keys())
            if not keys:
                raise InputError(f"`{path}` holds no tensors.", _WHAT)
            key = _pick(key, keys, f"`{path}`", noun="key")
            return key, handle.get_tensor(key)
    except HookdumpError:
        raise
    except Exception as exc:  # safetensors raises its own error type, and OSError
        raise InputError(f"`{path}` is not a safetensors file: {exc}", _WHAT) from exc


def _pick(key: str | None, names: list[str], where: str, noun: str = "tensor") -> str:
    """``key`` when ``where`` holds it; the only name when there is one and no key; else the error."""
    if key is None and len(names) == 1:
        return names[0]
    if key is not None and key in names:
        return key
    start = f"Say which tensor in {where} with --key" if key is None else f"No {noun} `{key}` in {where}"
    hint = did_you_mean(key, names) if key else ""
    raise UsageError(
        f"{start}; it holds {', '.join(names) or 'none'}.", hint or f"e.g. --key {names[0] if names else '?'}"
    )


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _entry(manifest: dict[str, Any] | None, file: str, key: str | None) -> dict[str, Any] | None:
    for entry in (manifest or {}).get("tensors", []):
        if isinstance(entry, dict) and entry.get("file") == file and entry.get("key") == key:
            return entry
    return None
