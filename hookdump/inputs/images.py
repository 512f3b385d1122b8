"""One image file to the pixels the model should see: decoded, turned upright as its EXIF says, scaled to
8 bits when it holds more (16-bit, float), converted to the model's mode; and, for the manifest, what was
done."""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..digest import sha256
from ..errors import InputError
from . import shards, tables

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


def check_image(path: Path, image_key: str | None = None) -> None:
    """The file exists and its header is an image (cheap: nothing decoded)."""
    fix = "Fix the path (in @list files, one path a line)."
    with _opened(path, f"Input `{path}`", fix, image_key) as image:
        try:
            image.verify()
        except (OSError, SyntaxError) as exc:
            raise _unreadable(f"Input `{path}`", exc) from exc


def load_formats() -> None:
    """Import Pillow's reader of every format now: a check in a forked process must import nothing (a
    thread of the parent's may have held an import's lock at the fork, and the child would wait on it)."""
    from PIL import Image

    Image.init()


def digest(path: Path | str, image_key: str | None = None) -> str:
    """The sha256 of an input: of its file, or of the image bytes of a shard's sample or a table's row."""
    encoded = _encoded(path, image_key)
    return sha256(path) if encoded is None else hashlib.sha256(encoded).hexdigest()


def _encoded(path: Path | str, image_key: str | None) -> bytes | None:
    """The image bytes of an input that is no file of its own (``SHARD::KEY``, ``FILE::ROW``), else None;
    ``image_key``: its image member or column."""
    if shards.SEPARATOR not in str(path):  # a file (its name not parsed: the hot path of every input)
        return None
    if tables.is_row(path):
        return tables.image_bytes(path, image_key)
    if shards.is_member(path):
        return shards.image_bytes(path, image_key)
    return None


def exists(path: Path) -> bool:
    """Whether an input is there to be read: a file, or a sample of a shard, a row of a table, there."""
    if tables.is_row(path):
        file, row = tables.split(path)
        try:
            return file.is_file() and row < tables.layout(file).rows
        except InputError:
            return False
    if not shards.is_member(path):
        return path.is_file()
    shard, key = shards.split(path)
    try:
        return shard.is_file() and key in shards.samples(shard)
    except InputError:
        return False


def stamp(path: Path) -> tuple[int, int]:
    """(size, mtime_ns) of an input's file (a sample's shard): what a cache of it is keyed by; (-1, -1)
    when it is not there."""
    file = (
        tables.split(path)[0]
        if tables.is_row(path)
        else shards.split(path)[0]
        if shards.is_member(path)
        else path
    )
    try:
        stat = file.stat()
    except OSError:
        return -1, -1
    return stat.st_size, stat.st_mtime_ns


def _bytes(path: Path, name: str, missing: str, image_key: str | None) -> bytes | None:
    """The encoded image of an input that is no file of its own (``SHARD::KEY``, ``FILE::ROW``), else None
    once the file is found to be one that can be opened (``missing``: the fix when it does not exist)."""
    encoded = _encoded(path, image_key)
    if encoded is not None:
        return encoded
    if path.is_dir():
        raise InputError(
            f"{name} is a folder, not an image file.",
            "Pass the folder itself as an input (it is read recursively); in @list files, one image a line.",
        )
    if not path.is_file():
        raise InputError(f"{name} does not exist.", missing)
    if path.stat().st_size == 0:
        raise InputError(f"{name} is empty (0 bytes): not an image.", _SKIP)
    return None


@contextlib.contextmanager
def _opened(
    path: Path, name: str, missing: str, image_key: str | None = None, data: bytes | None = None
) -> Iterator[PILImage]:
    """``Image.open`` with each way it fails as an InputError naming the file (``missing``: the fix when
    it does not exist), or the sample of a tar shard (``SHARD::KEY``: its image member, ``image_key``'s);
    ``data``: the input's bytes, already read. An image over Pillow's pixel limit is refused, never decoded
    with a warning."""
    from PIL import Image, UnidentifiedImageError

    if data is None:
        data = _bytes(path, name, missing, image_key)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path if data is None else io.BytesIO(data))
    except UnidentifiedImageError as exc:  # (read from bytes, its message names the in-memory file)
        if tables.is_row(path) or shards.is_member(path):
            raise InputError(
                f"{name} is not an image: its image bytes are no format Pillow reads.", _SKIP
            ) from exc
        named = exc if data is None else UnidentifiedImageError(f"cannot identify image file {str(path)!r}")
        raise _unreadable(name, named) from exc
    except (OSError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _unreadable(name, exc) from exc
    with image:
        yield image


def _unreadable(name: str, exc: BaseException) -> InputError:
    """Why an image file cannot be read, with the fix for that reason."""
    from PIL import Image

    if isinstance(exc, PermissionError):
        return InputError(
            f"{name} cannot be read: permission denied.",
            "Make it readable (chmod u+r), or leave it out (--skip-bad records it and goes on).",
        )
    if isinstance(exc, Image.DecompressionBombError | Image.DecompressionBombWarning):
        found = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(found[1]):,} pixels" if found else "more pixels than Pillow decodes"
        return InputError(
            f"{name} has {size}, over Pillow's limit of {Image.MAX_IMAGE_PIXELS:,} (its guard against"
            " decompression bombs).",
            "If the image is genuine, downscale it first (the model sees it at its input size anyway);"
            " else leave it out (--skip-bad records it and goes on).",
        )
    return InputError(f"{name} is not an image hookdump can read: {exc}", _SKIP)


_SKIP = (
    "Pass JPEG, PNG, ... files (a cut-short download or copy: fetch it again), or leave it out (--skip-bad"
    " records it and goes on)."
)


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


def _plan(image: PILImage, mode: str) -> _Plan:
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


def _record(image: PILImage, mode: str, plan: _Plan | None = None) -> dict[str, Any]:
    """What ``open_image(path, mode)`` does to an opened image (``plan``: ``_plan``'s, when made), read from
    its header (nothing decoded)."""
    record: dict[str, Any] = {"mode": image.mode, "size": list(image.size)}
    plan, turn = plan or _plan(image, mode), _orientation(image)
    if getattr(image, "is_animated", False):  # GIF, APNG, WebP animations; multi-page TIFF
        record |= {"frames": int(getattr(image, "n_frames", 1)), "frame_used": 0}
    if plan.text:
        record["conversion"] = plan.text
    if turn in _ORIENTATIONS:
        record["exif_transposed"] = f"{_ORIENTATIONS[turn]} (EXIF orientation {turn})"
    return record


def describe(path: Path, mode: str = "RGB", image_key: str | None = None) -> dict[str, Any]:
    """What ``open_image(path, mode)`` does to the file, read from its header (nothing decoded)."""
    with _opened(path, f"`{path}`", "Pass an existing image file.", image_key) as image:
        return _record(image, mode)


def _decoded(image: PILImage, mode: str, name: str, plan: _Plan | None = None) -> PILImage:
    """The opened image decoded, turned upright as its EXIF says, converted to ``mode`` as ``_plan`` says
    (``plan``: made already, from the header)."""
    from PIL import ImageOps

    try:
        plan = plan or _plan(image, mode)
        ImageOps.exif_transpose(image, in_place=True)  # (in place: no copy of an image already upright)
        return _apply(image, plan, mode, name)
    except OSError as exc:  # a truncated or corrupt file, found while decoding
        raise _unreadable(name, exc) from exc


def open_image(path: Path, mode: str = "RGB", option: str = "", image_key: str | None = None) -> PILImage:
    """The image decoded, turned upright as its EXIF says, converted to ``mode`` as ``_plan`` decides."""
    name = f"{option} `{path}`".strip()
    with _opened(path, name, "Pass an existing image file.", image_key) as image:
        return _decoded(image, mode, name)


def read(path: Path, mode: str = "RGB", image_key: str | None = None) -> tuple[PILImage, dict[str, Any]]:
    """``open_image`` and the input's record, from its bytes read once: ``path``, the ``sha256`` of those
    bytes (``digest``'s) and what ``describe`` says."""
    name, missing = f"`{path}`", "Pass an existing image file."
    data = _encoded(path, image_key)
    if data is None:  # a file: read at once, and only if that fails asked why (a folder, missing, empty)
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError as exc:
            _bytes(path, name, missing, image_key)
            raise _unreadable(name, exc) from exc
        if not data:
            _bytes(path, name, missing, image_key)
    with _opened(path, name, missing, image_key, data) as image:
        plan = _plan(image, mode)
        record = {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), **_record(image, mode, plan)}
        return _decoded(image, mode, name, plan), record


def labels(path: Path, label_column: str | None) -> dict[str, Any]:
    """An input's ``label`` (and a tar sample's ``metadata``) as the inputs' records keep them: a sample's
    ``.cls`` / ``.txt`` / ``.json``, a table row's ``label_column``; {} for a file (a class folder's label is
    its folder's name: ``classfolders``)."""
    if shards.is_member(path):
        return shards.label(path)
    if tables.is_row(path):
        return tables.label(path, label_column)
    return {}
