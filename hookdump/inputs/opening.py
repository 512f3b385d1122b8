"""An input opened as an image: its bytes (a file's; a tar shard sample's or a table row's image, by the
``SHARD::KEY`` / ``FILE::ROW`` dispatch), then ``Image.open``, each way that fails an InputError naming the
input and its fix."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from . import parts

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


def checked_bytes(path: Path, name: str, missing: str, image_key: str | None) -> bytes | None:
    """The encoded image of an input that is no file of its own (``SHARD::KEY``, ``FILE::ROW``), else None
    once the file is found to be one that can be opened (``missing``: the fix when it does not exist)."""
    encoded = parts.image_bytes(path, image_key)
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
def opened(
    path: Path, name: str, missing: str, image_key: str | None = None, data: bytes | None = None
) -> Iterator[PILImage]:
    """``Image.open`` with each way it fails as an InputError naming the file (``missing``: the fix when
    it does not exist), or the sample of a tar shard (``SHARD::KEY``: its image member, ``image_key``'s);
    ``data``: the input's bytes, already read. An image over Pillow's pixel limit is refused, never decoded
    with a warning."""
    from PIL import Image, UnidentifiedImageError

    if data is None:
        data = checked_bytes(path, name, missing, image_key)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path if data is None else io.BytesIO(data))
    except UnidentifiedImageError as exc:  # (read from bytes, its message names the in-memory file)
        if parts.kind_of(path) is not None:
            raise InputError(
                f"{name} is not an image: its image bytes are no format Pillow reads.", _SKIP
            ) from exc
        named = exc if data is None else UnidentifiedImageError(f"cannot identify image file {str(path)!r}")
        raise unreadable(name, named) from exc
    except (OSError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise unreadable(name, exc) from exc
    with image:
        yield image


def unreadable(name: str, exc: BaseException) -> InputError:
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
