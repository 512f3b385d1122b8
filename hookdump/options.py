"""The options of one capture, shared by the API that takes them and the manifest that records them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture: every option of ``hookdump capture`` but the model, the inputs and the layers.

    Attributes:
        out: output folder; ``overwrite`` replaces a capture already there.
        formats: ``npy``, ``pt``, ``safetensors``.
        what: ``output``, ``input`` or ``both``.
        grad: also save the gradient of each captured output, for class ``target`` (default: top class).
        dtype: compute precision (autocast); ``save_dtype="keep"`` saves tensors in it instead of float32.
        early_stop: stop the forward pass once every wanted layer has run (never with ``grad``).
    """

    out: Path = Path("hookdump-out")
    formats: tuple[str, ...] = ("npy",)
    what: str = "output"
    grad: bool = False
    target: int | None = None
    device: str = "auto"
    dtype: str = "float32"
    channels_last: bool = False
    save_dtype: str = "float32"
    batch_size: int = 16
    early_stop: bool = True
    overwrite: bool = False
