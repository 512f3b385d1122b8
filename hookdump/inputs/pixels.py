"""How an opened image becomes the pixels the model should see: decoded, turned upright as its EXIF says,
scaled to 8 bits when it holds more (16-bit, float), converted to the model's mode; and, for the manifest,
what was done (read from the header, nothing decoded)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputError
from .opening import unreadable

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


# Pillow's convert() is right for 8-bit modes (P, LA, CMYK, RGBA, L, 1) but clips 16-bit and float grayscale
# to 0..255 (a photo turns white), so those are scaled here first. Pillow opens 16-bit RGB(A) and LA PNG/TIFF
# files as "RGB"/"RGBA" already reduced to the high byte (value >> 8, within one level of value / 257), so
# nothing is left to do for them but record it, from the file's raw mode.
_NAMES = {
    "1": "1-bit black and white",
    "L": "8-bit grayscale",
    "LA": "grayscale with alpha",
    "P": "palette",
    "PA": "palette with alpha",
    "RGB": "8-bit RGB",
}
_ALPHA = {"LA", "La", "PA", "RGBA", "RGBa"}
_ORIENTATIONS = {
    2: "mirrored left to right",
    3: "rotated 180 degrees",
    4: "mirrored top to bottom",
    5: "mirrored left to right, then rotated 90 degrees counter-clockwise",
    6: "rotated 90 degrees clockwise",
    7: "mirrored left to right, then rotated 90 degrees clockwise",
    8: "rotated 90 degrees counter-clockwise",
}


@dataclass(frozen=True)
class _Plan:
    """How an image becomes the model's mode: scaled here from ``0..top`` (when ``top``), then Pillow."""

    top: float
    text: str  # what is done, for the manifest; empty when nothing is


def plan_of(image: PILImage, mode: str) -> _Plan:
    """The one place that decides, and says, how an opened (not yet decoded) image becomes ``mode``."""
    source, top, steps = image.mode, 0.0, []
    if source == "I" or source.startswith("I;16"):
        source, top = "L", 65535.0
        steps.append("16-bit grayscale scaled to 8 bits (value / 257)")
    elif source == "F":
        source, top = "L", 1.0
        steps.append("32-bit float in [0, 1] scaled to 8 bits (value * 255)")
    elif ";16" in (raw := _rawmode(image)):
        steps.append(f"16-bit {raw.split(';')[0]} reduced to 8 bits by Pillow (high byte)")
    if source != mode:
        alpha = source in _ALPHA or "transparency" in image.info
        dropped = " (alpha dropped)" if alpha and mode not in _ALPHA else ""
        steps.append(f"to {mode}{dropped}" if steps else f"{_NAMES.get(source, source)} to {mode}{dropped}")
    return _Plan(top, ", then ".join(steps))


def _rawmode(image: PILImage) -> str:
    """How the file stores its pixels (``RGB;16B`` for a 48-bit PNG), from the header; "" once decoded."""
    tiles = getattr(image, "tile", None) or []
    args = tiles[0][3] if tiles else None  # a str, or a tuple that starts with it
    raw = args[0] if isinstance(args, tuple) and args else args
    return raw if isinstance(raw, str) else ""


def _apply(image: PILImage, plan: _Plan, mode: str, name: str) -> PILImage:
    """Carry out ``plan`` on the decoded image."""
    from PIL import Image

    if plan.top:
        values = np.asarray(image, dtype=np.float64)
        low, high = float(values.min()), float(values.max())  # NaN when any is
        if not (low >= 0 and high <= plan.top):
            kind = "integers" if plan.top > 1 else "floats"
            limit = "0 to 65535, the 16-bit range" if plan.top > 1 else "[0, 1], the float range"
            raise InputError(
                f"{name} holds {kind} from {low:g} to {high:g}, outside {limit} hookdump scales to 8 bits.",
                "Save it as an 8-bit or 16-bit image.",
            )
        image = Image.fromarray(np.rint(values * 255.0 / plan.top).astype(np.uint8))
    return image.convert(mode)


def _orientation(image: PILImage) -> int:
    """The EXIF orientation tag read from the header (1: shown as stored)."""
    from PIL import ExifTags, Image

    # Image.getexif, not PngImageFile.getexif: that one decodes the pixels to look for an eXIf chunk after
    # them (Pillow writes it before them), so a PNG rotated by such a late chunk is not reported.
    return int(Image.Image.getexif(image).get(ExifTags.Base.Orientation, 1))


def record_of(image: PILImage, mode: str, plan: _Plan | None = None) -> dict[str, Any]:
    """What ``open_image(path, mode)`` does to an opened image (``plan``: ``plan_of``'s, when made), read from
    its header (nothing decoded)."""
    record: dict[str, Any] = {"mode": image.mode, "size": list(image.size)}
    plan, turn = plan or plan_of(image, mode), _orientation(image)
    if getattr(image, "is_animated", False):  # GIF, APNG, WebP animations; multi-page TIFF
        record |= {"frames": int(getattr(image, "n_frames", 1)), "frame_used": 0}
    if plan.text:
        record["conversion"] = plan.text
    if turn in _ORIENTATIONS:
        record["exif_transposed"] = f"{_ORIENTATIONS[turn]} (EXIF orientation {turn})"
    return record


def decoded(image: PILImage, mode: str, name: str, plan: _Plan | None = None) -> PILImage:
    """The opened image decoded, turned upright as its EXIF says, converted to ``mode`` as ``plan_of`` says
    (``plan``: made already, from the header)."""
    from PIL import ImageOps

    try:
        plan = plan or plan_of(image, mode)
        ImageOps.exif_transpose(image, in_place=True)  # (in place: no copy of an image already upright)
        return _apply(image, plan, mode, name)
    except OSError as exc:  # a truncated or corrupt file, found while decoding
        raise unreadable(name, exc) from exc
