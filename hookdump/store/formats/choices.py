"""The formats and save dtypes a capture may ask for (``--format``, ``--save-dtype``), checked against each
other before any work; a tensor as it is saved."""

from __future__ import annotations

import torch

from ...errors import UsageError, check_choice

FORMATS = ("npy", "pt", "safetensors", "zarr")
SAVE_DTYPES = ("float32", "float16", "bfloat16", "keep")


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


def check_save_dtype(save_dtype: str, formats: tuple[str, ...], dtypes: set[torch.dtype]) -> None:
    """``keep`` writes tensors as the model made them, ``float16`` / ``bfloat16`` halve the files; numpy
    (and so zarr) cannot hold bfloat16."""
    check_choice("--save-dtype", save_dtype, SAVE_DTYPES)
    numpy = [f for f in formats if f in ("npy", "zarr")]
    if numpy and (save_dtype == "bfloat16" or (save_dtype == "keep" and torch.bfloat16 in dtypes)):
        what = "--save-dtype bfloat16" if save_dtype == "bfloat16" else "--save-dtype keep"
        where, why = (".npy", "numpy has") if numpy[0] == "npy" else ("tensors.zarr", "numpy and zarr have")
        raise UsageError(
            f"{what} cannot write bfloat16 tensors to {where}: {why} no bfloat16.",
            "Use --format pt or --format safetensors (both keep bfloat16), or --save-dtype float16"
            " (or float32).",
        )


def for_saving(tensor: torch.Tensor, save_dtype: str) -> torch.Tensor:
    """Float tensors are saved as ``save_dtype`` unless ``keep``; the manifest records the original dtype."""
    if save_dtype == "keep" or not tensor.is_floating_point():
        return tensor
    return tensor.to(getattr(torch, save_dtype))
