"""Grad-CAM (Selvaraju et al. 2017) from the files ``capture --grad`` wrote: no model, no torch.

For the maps ``A`` (C, H, W) of one image and their gradient ``G`` (the class score's, saved beside them as
``<layer>.grad``): ``w_c = mean over space of G_c``, ``cam = relu(sum_c w_c A_c)``, then min-max scaled to
0..1. Both tensors are read the same way (:mod:`hookdump.maps`), so channels-last and token layers work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError, NoMap
from ..store.folder.tensorfile import Array, Loaded, gradient, is_gradient, load
from .maps import describe_nonfinite, feature_maps, to_unit

_FIX = "Capture again with --grad (and --target CLASS), then show the layer's output file with --gradcam."


@dataclass
class Cam:
    """Grad-CAM of one image: ``cam`` scaled to 0..1, ``raw`` before scaling, the channel ``weights``."""

    cam: Array
    raw: Array
    weights: Array
    layout: str
    target: int | None
    notes: list[str] = field(default_factory=list)


def cam_of(file: Path, *, key: str | None = None, index: int = 0) -> Cam:
    """Grad-CAM of image ``index`` from a captured output and its gradient (a file, or a capture folder
    with ``key``)."""
    return compute(load(file, key), index)


def compute(loaded: Loaded, index: int) -> Cam:
    """Grad-CAM of image ``index`` of ``loaded``, whose gradient is found beside it."""
    if is_gradient(loaded):
        raise InputError(
            f"`{loaded.source}` is a gradient: --gradcam reads it beside the layer's output.",
            "Pass the output file (the same name without .grad).",
        )
    grad = gradient(loaded)
    if grad is None:
        raise NoMap(f"`{loaded.source}` has no gradient beside it: Grad-CAM needs one.", _FIX)
    if grad.array.shape != loaded.array.shape:
        raise InputError(
            f"The gradient `{grad.source}` has shape {grad.array.shape}, not the {loaded.array.shape} of"
            f" `{loaded.source}`.",
            _FIX,
        )
    acts = feature_maps(loaded, index)
    grads = feature_maps(grad, index).maps
    name = loaded.stem
    notes = describe_nonfinite(name, acts.maps, "taken as 0 in Grad-CAM")
    notes += describe_nonfinite(f"{name}.grad", grads, "taken as 0 in Grad-CAM")
    a, g = (np.where(np.isfinite(x), x, 0.0).astype(np.float64) for x in (acts.maps, grads))
    weights = g.mean(axis=(1, 2))
    raw = np.maximum(np.tensordot(weights, a, axes=1), 0.0)
    cam, _, _, flat = to_unit(raw, None)
    if flat.all():
        notes.append(
            f"{name}: Grad-CAM is {float(raw.flat[0]):g} everywhere (no positive evidence for the class)"
        )
    classes = ((loaded.manifest or {}).get("grad") or {}).get("classes") or []
    target = int(classes[index]) if index < len(classes) else None
    return Cam(cam, raw.astype(np.float32), weights.astype(np.float32), acts.layout, target, notes)
