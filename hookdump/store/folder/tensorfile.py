"""One tensor as ``show`` draws it (:class:`Loaded`): a name in a capture folder, read through the capture
(:class:`hookdump.store.folder.reader.Capture`, the one reader of a capture folder), or a loose ``.npy``,
``.safetensors`` or ``.pt`` file, with its manifest entry when a manifest beside it lists it. No torch but for
a ``.pt`` file; bfloat16 stays its uint16 bits, widened in numpy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InputError, UsageError, did_you_mean
from ..formats.safetensors import SAFETENSORS_DTYPES, safetensors_header, safetensors_tensor
from . import inputtable
from .captured import file_stem
from .manifest import MANIFEST, inside
from .reader import Capture, entry_of, read_manifest

SUFFIXES = (".npy", ".pt", ".pth", ".safetensors")
_WHAT = "Pass a .npy, .pt or .safetensors file that `hookdump capture` wrote, or a capture folder."

Array = np.ndarray[Any, Any]


@dataclass
class Loaded:
    """A tensor read from disk (memory-mapped when it can be), where it came from, and what the capture's
    manifest says about it. ``array`` is as stored; a bfloat16 tensor is held as its uint16 bits."""

    path: Path
    key: str | None
    array: Array
    bfloat16: bool = False
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
        return self.stem

    @property
    def stem(self) -> str:
        """The tensor's short name: the safetensors key, else the file name without its suffix."""
        return self.key or self.path.stem

    @property
    def source(self) -> str:
        return f"{self.path}[{self.key}]" if self.key else str(self.path)

    @property
    def layout(self) -> str | None:
        """``NCHW`` / ``NHWC`` / ``NLC`` when the manifest records it for this tensor."""
        value = (self.entry or {}).get("layout")
        return str(value) if value else None

    @property
    def prefix_tokens(self) -> int | None:
        """Class / distillation / register tokens in front of the patch tokens, when the manifest says."""
        value = ((self.manifest or {}).get("model") or {}).get("num_prefix_tokens")
        return int(value) if isinstance(value, int) else None

    @property
    def images(self) -> int | None:
        """How many images the capture took (the manifest's inputs), when it says."""
        return inputtable.count((self.manifest or {}).get("inputs")) or None

    @property
    def windows(self) -> dict[str, Any] | None:
        """The manifest's ``windows`` record (``per_image``; ``size``, ``map``, ``shift`` where known) of a
        tensor whose first axis holds several rows per image (Swin's windows), else None."""
        value = (self.entry or {}).get("windows")
        return value if isinstance(value, dict) and int(value.get("per_image", 1)) > 1 else None

    @property
    def count(self) -> int:
        """How many images the tensor holds: its rows, or its rows over the windows per image."""
        per_image = int(self.windows["per_image"]) if self.windows else 1
        return len(self.array) // per_image

    @property
    def class_token(self) -> bool:
        """Whether the first prefix token is a class token (the manifest's ``model.class_token``; captures
        from before it was recorded: when there are prefix tokens)."""
        model = (self.manifest or {}).get("model") or {}
        return bool(model.get("class_token", bool(self.prefix_tokens)))

    def image(self, index: int) -> Array:
        """Image ``index`` of the batch as float32 (bfloat16 widened: its bits are float32's upper half)."""
        item = np.asarray(self.array[index])
        if self.bfloat16:
            return (item.astype(np.uint32) << 16).view(np.float32)
        return item.astype(np.float32)


def load(path: Path, key: str | None = None) -> Loaded:
    """The tensor in ``path`` (``key`` picks one in a safetensors file, a capture folder or its
    ``tensors.zarr``)."""
    if not path.exists():
        raise InputError(f"`{path}` does not exist.", _WHAT)
    if path.is_dir():  # a capture folder, or its tensors.zarr (``key``: an array of it)
        folder = path.parent if path.suffix == ".zarr" and (path.parent / MANIFEST).is_file() else path
        capture = Capture(folder)
        if key is not None and key not in capture.entries:  # an array's name: the tensor's, file-safe
            key = {file_stem(n): n for n in capture.entries}.get(key, key)
        name = _pick(key, list(capture.entries), f"`{path}`")
        entry = capture.entries[name]
        array, bfloat16 = capture.bits(name)
        return Loaded(folder / entry["file"], entry.get("key"), array, bfloat16, entry, capture.manifest)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"`{path}` is not a tensor file: show reads .npy, .pt and .safetensors.", _WHAT)
    if key is not None and suffix != ".safetensors":
        raise UsageError(
            f"--key is for .safetensors files and capture folders, not `{path.name}`.", "Drop --key."
        )
    bfloat16 = False
    if suffix == ".safetensors":
        key, array, bfloat16 = _read_safetensors(path, key)
    else:
        array = _read_npy(path) if suffix == ".npy" else _read_pt(path)
    manifest = read_manifest(path.parent)
    return Loaded(path, key, array, bfloat16, entry_of(manifest, path.name, key), manifest)


def expand(path: Path, key: str | None) -> list[tuple[Path, str | None]]:
    """What ``path`` names, as (file, key) pairs for :func:`load`: every tensor of a capture folder or a
    safetensors file given without ``key`` (manifest order), else the one tensor."""
    if path.is_dir() and key is None:
        return [(path / e["file"], e.get("key")) for e in Capture(path).entries.values()]
    if path.is_file() and path.suffix.lower() == ".safetensors" and key is None:
        return [(path, k) for k in _keys(path)]
    return [(path, key)]


def is_gradient(loaded: Loaded) -> bool:
    """Whether ``loaded`` is a gradient capture --grad wrote (kind ``grad``, or named ``<stem>.grad``)."""
    return (loaded.entry or {}).get("kind") == "grad" or loaded.stem.endswith(".grad")


def gradient(loaded: Loaded) -> Loaded | None:
    """The gradient capture --grad wrote for ``loaded`` (the manifest's ``grad`` entry of the same layer,
    call and element; without a manifest, ``<stem>.grad`` beside it), or None."""
    folder, entry = loaded.path.parent, loaded.entry
    if entry is not None and loaded.manifest is not None:
        same = ("layer", "call", "index")
        found = [
            e for e in loaded.manifest.get("tensors", [])
            if isinstance(e, dict) and e.get("kind") == "grad" and all(e.get(k) == entry.get(k) for k in same)
        ]  # fmt: skip
        found.sort(key=lambda e: e.get("format") != entry.get("format"))
        return load(inside(folder, found[0]["file"]), found[0].get("key")) if found else None
    if loaded.key is not None:
        grad_key = f"{loaded.key}.grad"
        return load(loaded.path, grad_key) if grad_key in _keys(loaded.path) else None
    sibling = loaded.path.with_name(f"{loaded.path.stem}.grad{loaded.path.suffix}")
    return load(sibling) if sibling.is_file() else None


def _read_npy(path: Path) -> Array:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"`{path}` is not a .npy file numpy can read: {exc}", _WHAT) from exc
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        raise InputError(f"`{path}` does not hold a numeric array.", _WHAT)
    return array


def _read_pt(path: Path) -> Array:
    import torch

    # for speed: torch only for a .pt file
    from ...model.checkpoints import tensor_refusal, torch_load

    try:
        value = torch_load(path)
    except Exception as exc:  # unpickling raises many kinds
        raise tensor_refusal(path, exc, _WHAT) from exc
    if not isinstance(value, torch.Tensor) or value.is_complex():
        raise InputError(f"`{path}` holds a {type(value).__name__}, not a real tensor.", _WHAT)
    value = value.detach()
    array: Array = (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    return array


def _header(path: Path) -> tuple[int, dict[str, Any]]:
    """A safetensors file's JSON header (tensors only) and where its data starts; dtypes numpy can hold."""
    start, tensors = safetensors_header(path, _WHAT)
    try:
        for info in tensors.values():
            if info["dtype"] not in SAFETENSORS_DTYPES:
                raise ValueError(f"dtype {info['dtype']}")
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"`{path}` is not a safetensors file: {exc}", _WHAT) from exc
    return start, tensors


def _keys(path: Path) -> list[str]:
    keys = list(_header(path)[1])
    if not keys:
        raise InputError(f"`{path}` holds no tensors.", _WHAT)
    return keys


def _read_safetensors(path: Path, key: str | None) -> tuple[str, Array, bool]:
    """The tensor ``key`` memory-mapped from its bytes (bfloat16: as uint16 bits), and whether bfloat16."""
    start, header = _header(path)
    if not header:
        raise InputError(f"`{path}` holds no tensors.", _WHAT)
    key = _pick(key, list(header), f"`{path}`", noun="key")
    array, bfloat16 = safetensors_tensor(path, start, header, key, _WHAT)
    return key, (array.view(np.uint16) if bfloat16 else array), bfloat16


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
