"""Checkpoint files to state dicts: ``.safetensors``, or ``torch.load(weights_only=True)`` with an allow-list
for ordinary training metadata (never unpickling code), and why torch refused a file; whether a state dict
fits the model is ``statediff.py``'s."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError

CHECKPOINT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")


def metadata_globals() -> list[Any]:
    """What training scripts save beside the weights and ``weights_only`` refuses by default:
    ``argparse.Namespace``, numpy scalars, arrays and dtypes (also under numpy 1's names), paths. Rebuilding
    any of them runs no code of the file's choosing."""
    import argparse
    import pathlib

    import numpy as np

    scalar, reconstruct = np.float64(0).__reduce__()[0], np.arange(1).__reduce__()[0]
    dtypes = {type(np.dtype(code)) for code in np.typecodes["All"] if code != "O"}
    return [
        argparse.Namespace, np.dtype, np.ndarray, scalar, reconstruct, *sorted(dtypes, key=str),
        (scalar, "numpy.core.multiarray.scalar"), (reconstruct, "numpy.core.multiarray._reconstruct"),
        pathlib.PosixPath, pathlib.PurePosixPath, pathlib.PureWindowsPath,
    ]  # fmt: skip


def torch_load(path: Path, map_location: str = "cpu") -> Any:
    """``torch.load(weights_only=True)`` that also accepts :func:`metadata_globals`."""
    with torch.serialization.safe_globals(metadata_globals()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)  # the error says it all
        return torch.load(path, map_location=map_location, weights_only=True)


def blocked_global(exc: BaseException) -> str | None:
    """The line of torch's refusal that names what it would not unpickle (``GLOBAL posix.system``)."""
    for line in str(exc).splitlines():
        if "GLOBAL" in line:
            return line.split("WeightsUnpickler error:")[-1].strip()
    return None


def _reason(exc: BaseException) -> str:
    """torch's reason for not reading a file, without its advice to retry with ``weights_only=False``: the
    unpickler's own line (``Unsupported operand 103``), else the first sentence."""
    text = str(exc).strip()
    _, found, after = text.partition("WeightsUnpickler error:")
    lines = [line.strip() for line in after.splitlines() if line.strip()] if found else []
    return lines[0] if lines else (text.splitlines() or [""])[0].split(". ")[0]


def tensor_refusal(path: Path, exc: BaseException, hint: str) -> InputError:
    """Why a ``.pt`` file of a tensor was not read (``show``, ``hookdump.open``): a global that could run
    code, named; else torch's reason."""
    found = re.search(r"GLOBAL ([\w.]+)", blocked_global(exc) or "")
    if found is not None:
        return InputError(
            f"`{path}` holds `{found[1]}`, which torch.load(weights_only=True) refuses to unpickle (it could"
            " run code); hookdump never unpickles code.",
            hint,
        )
    return InputError(f"`{path}` is not a tensor file torch.load can read: {_reason(exc)}", hint)


def refusal(path: Path, exc: BaseException) -> InputError:
    """Why ``torch_load`` refused ``path``: a pickled model, something that could run code, a broken file."""
    line = blocked_global(exc)
    found = re.search(r"GLOBAL ([\w.]+)", line or "")
    if found is None:
        return InputError(
            f"Checkpoint `{path}` is not a file torch.load can read: {type(exc).__name__}: {_reason(exc)}",
            "Check that the file is complete (not a failed download); hookdump reads state dicts saved"
            " with torch.save(model.state_dict(), path), or .safetensors files.",
        )
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:
        names = [found[1]]
    classes = [n for n in names if n.startswith("torch.nn.modules.")]
    if classes:
        model = found[1] if not found[1].startswith("torch.") else classes[0]
        return InputError(
            f"Checkpoint `{path}` holds a whole pickled model (`{model}`), not a state dict: unpickling it"
            " would run code, which hookdump never does (it reads .pth with torch.load(weights_only=True)).",
            "Where the model is built, save its weights instead: torch.save(model.state_dict(), path), or"
            " safetensors.torch.save_file(model.state_dict(), path).",
        )
    return InputError(
        f"Checkpoint `{path}` holds `{found[1]}`, which torch.load(weights_only=True) refuses to unpickle"
        f" (it could run code): {line}",
        "hookdump never unpickles code. If you trust the file, load it yourself and save only the weights:"
        " torch.save(torch.load(path, weights_only=False)['state_dict'], 'weights.pth').",
    )


def read_checkpoint(path: Path, *, meta: bool = False) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors`` or a ``torch.load``-able file (``weights_only=True``).

    With ``meta``, only names and shapes are read (tensors on the meta device): a fast check before any work.
    """
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.suffix in CHECKPOINT_SUFFIXES)
        fix = f"It holds {', '.join(inside[:5])}: pass one of them." if inside else "Pass a weights file."
        raise InputError(f"Checkpoint `{path}` is a folder, not a file.", fix)
    if not path.is_file():
        raise InputError(
            f"Checkpoint `{path}` does not exist.", "Pass the path of a .safetensors or .pth file."
        )
    if path.suffix not in CHECKPOINT_SUFFIXES:
        raise InputError(
            f"Checkpoint `{path}` has an unknown extension `{path.suffix}`.",
            f"hookdump reads {', '.join(CHECKPOINT_SUFFIXES)}.",
        )
    if path.suffix == ".safetensors":
        try:
            return _read_safetensors(path, meta)
        except Exception as exc:
            raise InputError(
                f"Checkpoint `{path}` is not a valid safetensors file: {exc}",
                "Check that the file is complete (not a failed download), or write it again with"
                " safetensors.torch.save_file(model.state_dict(), path).",
            ) from exc
    other = _not_torch(path)
    if other is not None:
        raise InputError(f"Checkpoint `{path}` is {other[0]}, not a file torch.save wrote.", other[1])
    try:
        obj = torch_load(path, map_location="meta" if meta else "cpu")
    except Exception as exc:
        raise refusal(path, exc) from exc
    return _unwrap_state_dict(obj, path)


#: The number torch.save's legacy (pre-zip) format pickles first: 0x1950a86a20f9469cfc6c, little-endian.
_LEGACY_MAGIC = (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def _not_torch(path: Path) -> tuple[str, str] | None:
    """What a ``.pth`` / ``.pt`` / ``.bin`` / ``.ckpt`` file is when its first bytes show torch.save did not
    write it (a zip archive, or the legacy pickle that starts with torch's magic number): (what, fix)."""
    with path.open("rb") as handle:
        head = handle.read(32)
    size = path.stat().st_size
    if head.startswith(b"PK\x03\x04") or _LEGACY_MAGIC in head:
        return None  # torch.save's zip archive, or its legacy format (any pickle protocol)
    weights = "save the weights with torch.save(model.state_dict(), path) or safetensors.torch.save_file"
    header = int.from_bytes(head[:8], "little") if len(head) >= 9 else 0
    if head[8:9] == b"{" and 0 < header < size:
        return (
            "a safetensors file with another extension",
            f"Rename it to {path.with_suffix('.safetensors').name}: hookdump reads safetensors by the"
            " extension.",
        )
    if head.startswith(b"\x93NUMPY"):
        return "a NumPy array file (.npy)", f"Where the model is built, {weights}."
    if head.startswith(b"\x89HDF"):
        return "an HDF5 file (Keras or TensorFlow weights?)", f"Convert it: in PyTorch, {weights}."
    if head[:1] == b"\x80" and 2 <= head[1] <= 5:
        return (
            f"a plain Python pickle (protocol {head[1]}, from pickle.dump)",
            f"Load it where it was made and {weights}.",
        )
    return None


def _read_safetensors(path: Path, meta: bool) -> dict[str, torch.Tensor]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not meta:
        return load_file(str(path), device="cpu")
    with safe_open(str(path), framework="pt") as handle:
        names: list[str] = list(handle.keys())
        return {k: torch.empty(handle.get_slice(k).get_shape(), device="meta") for k in names}


def _unwrap_state_dict(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    for key in ("state_dict", "model", "model_state_dict", "state_dict_ema"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise InputError(
            f"Checkpoint `{path}` does not hold a state dict (a mapping of names to tensors).",
            "Save one with torch.save(model.state_dict(), path).",
        )
    if obj and all(k.startswith("module.") for k in obj):
        obj = {k[len("module.") :]: v for k, v in obj.items()}
    return dict(obj)
