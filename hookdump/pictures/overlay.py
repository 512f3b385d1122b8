"""A map laid over the photo: mean |activation| (or Grad-CAM) resized onto the photo as the model saw it.

When the tensor comes from a capture folder, the photo is first resized and center-cropped the way timm's
eval transform did (the manifest's ``transform``: ``input_size``, ``crop_pct``, ``interpolation``), with the
arithmetic torchvision uses on PIL images; otherwise the map is stretched over the whole photo. The map is
min-max scaled, resized bilinearly, coloured (inferno, or grey) and blended with weight ``alpha``.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..inputs.images import digest, stamp
from ..store.folder import inputtable
from .colormap import paint
from .maps import describe_nonfinite, to_unit

if TYPE_CHECKING:
    from PIL.Image import Image

    from ..store.folder.tensorfile import Array, Loaded


def heat(maps: Array, name: str) -> tuple[Array, list[str]]:
    """Mean |activation| over the channels (NaN / Inf as 0), min-max scaled to 0..1, and notes."""
    notes = describe_nonfinite(name, maps, "taken as 0 in the heat map")
    mean = np.abs(np.where(np.isfinite(maps), maps, 0.0)).mean(axis=0)
    unit, low, _, flat = to_unit(mean, None)
    if flat.all():
        notes.append(f"{name}: the heat map is flat (mean |activation| {float(low.flat[0]):g} everywhere)")
    return unit, notes


def blend(unit: Array, photo: Image, alpha: float, colours: str) -> Array:
    """``unit`` (0..1) resized bilinearly to ``photo``, coloured, and blended onto it with weight alpha."""
    from PIL import Image as PILImage

    resized = PILImage.fromarray(np.ascontiguousarray(unit, np.float32)).resize(
        photo.size, PILImage.Resampling.BILINEAR
    )
    colour = paint(np.asarray(resized), colours).astype(float)
    mixed = (1 - alpha) * np.asarray(photo.convert("RGB"), float) + alpha * colour
    return np.clip(mixed + 0.5, 0, 255).astype(np.uint8)


def fit_photo(photo: Image, transform: dict[str, Any] | None) -> tuple[Image, str]:
    """The photo as the model's eval transform cropped it (when the manifest says how), and how.

    Like timm's eval transform on a PIL image (torchvision's ``Resize`` then ``CenterCrop``): the shorter
    side to ``floor(size / crop_pct)`` (both sides for a non-square input; torchvision's ``resize`` where the
    manifest has one), the longer one to
    ``int(short * long / short_before)``, then the centre ``input_size`` with ``round((h - th) / 2)``."""
    from PIL import Image as PILImage

    if not transform or "input_size" not in transform:
        return photo, f"the whole photo ({photo.width}x{photo.height}; no capture manifest beside the file)"
    if transform.get("callable"):  # api.capture(transform=...): how it crops is the caller's own business
        whole = f"the whole photo ({photo.width}x{photo.height}"
        return photo, f"{whole}; the capture's transform was the caller's own, its crop unknown)"
    _, height, width = (int(d) for d in transform["input_size"])
    crop_pct = float(transform.get("crop_pct") or 1.0)
    modes = PILImage.Resampling
    resample = {
        "nearest": modes.NEAREST, "bilinear": modes.BILINEAR, "bicubic": modes.BICUBIC,
        "box": modes.BOX, "hamming": modes.HAMMING, "lanczos": modes.LANCZOS,
    }.get(str(transform.get("interpolation")), modes.BILINEAR)  # fmt: skip
    w, h = photo.size
    if transform.get("resize") or height == width:  # torchvision's `resize` is the shorter side's
        short = int(transform.get("resize") or math.floor(height / crop_pct))
        longer = int(short * max(w, h) / min(w, h))
        size = (short, longer) if w <= h else (longer, short)
    else:
        size = (math.floor(width / crop_pct), math.floor(height / crop_pct))
    fitted = photo if size == photo.size else photo.resize(size, resample)
    top, left = round((size[1] - height) / 2.0), round((size[0] - width) / 2.0)
    fitted = fitted.crop((left, top, left + width, top + height))
    return fitted, f"resized and center-cropped to {width}x{height} as the model's eval transform did"


def _digest(photo: Path) -> str:
    """The photo's sha256, computed once per version of the file (``show`` of many tensors asks for each)."""
    return _digest_of(str(photo), *stamp(photo))


@functools.lru_cache(maxsize=16)
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    return digest(Path(path))


def photo_notes(loaded: Loaded, photo: Path, index: int) -> list[str]:
    """A note when the manifest says image ``index`` was another photo than ``photo``."""
    inputs = inputtable.records(loaded.path.parent, (loaded.manifest or {}).get("inputs"))
    if index >= len(inputs) or not isinstance(inputs[index], dict) or "sha256" not in inputs[index]:
        return []
    if _digest(photo) == inputs[index]["sha256"]:
        return []
    return [f"`{photo}` is not the image {index} of this capture (`{inputs[index].get('path')}`)."]
