"""``--device``: where the model runs."""

from __future__ import annotations

import torch

from ..errors import UsageError


def resolve_device(spec: str) -> torch.device:
    """``auto`` picks CUDA when present; ``cuda``/``cuda:N`` must exist."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise UsageError(f"Unknown device `{spec}`.", "Use auto, cpu, cuda or cuda:N.") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"--device {spec}: CUDA is not available on this machine (torch {torch.__version__}).",
                "Use --device cpu, or --device auto to use a GPU only when there is one.",
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UsageError(
                f"--device {spec}: this machine has {count} CUDA device(s).",
                f"Use cuda:0 ... cuda:{count - 1}.",
            )
    elif device.type != "cpu":
        raise UsageError(f"Device `{spec}` is not supported.", "Use auto, cpu, cuda or cuda:N.")
    return device
