"""The one reader of an input (a file, a tar shard's sample, a table's row) for every wing: its header
checked, its pixels for the model (``pixels``) and its record from one read of its bytes (``read``), its
sha256, whether it is there, its file's stamp, its labels."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..digest import sha256
from ..urls import is_url
from . import fetch, parts, pixels
from .fetch import shown
from .opening import checked_bytes, opened, unreadable

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


def check_image(path: Path, image_key: str | None = None) -> None:
    """The file exists and its header is an image (cheap: nothing decoded)."""
    fix = "Fix the path (in @list files, one path a line)."
    name = f"Input `{shown(path)}`"
    with opened(path, name, fix, image_key) as image:
        try:
            image.verify()
        except (OSError, SyntaxError) as exc:
            raise unreadable(name, exc) from exc


def load_formats() -> None:
    """Import Pillow's reader of every format now: a check in a forked process must import nothing (a
    thread of the parent's may have held an import's lock at the fork, and the child would wait on it)."""
    from PIL import Image

    Image.init()


def digest(path: Path | str, image_key: str | None = None) -> str:
    """The sha256 of an input: of its file, or of the image bytes of a shard's sample or a table's row; an
    input named by its URL (a journal's record) is fetched again first if the object changed."""
    if is_url(str(path)):
        path = fetch.current(str(path))
    encoded = parts.image_bytes(path, image_key)
    return sha256(path) if encoded is None else hashlib.sha256(encoded).hexdigest()


def exists(path: Path) -> bool:
    """Whether an input is there to be read: a file, or a sample of a shard, a row of a table, there."""
    return parts.holds(path)


def stamp(path: Path) -> tuple[int, int]:
    """(size, mtime_ns) of an input's file (a sample's shard): what a cache of it is keyed by; (-1, -1)
    when it is not there."""
    try:
        stat = parts.container(path).stat()
    except OSError:
        return -1, -1
    return stat.st_size, stat.st_mtime_ns


def describe(path: Path, mode: str = "RGB", image_key: str | None = None) -> dict[str, Any]:
    """What ``open_image(path, mode)`` does to the file, read from its header (nothing decoded)."""
    with opened(path, f"`{shown(path)}`", "Pass an existing image file.", image_key) as image:
        return pixels.record_of(image, mode)


def open_image(path: Path, mode: str = "RGB", option: str = "", image_key: str | None = None) -> PILImage:
    """The image decoded, turned upright as its EXIF says, converted to ``mode`` as ``pixels.plan_of``
    decides."""
    name = f"{option} `{shown(path)}`".strip()
    with opened(path, name, "Pass an existing image file.", image_key) as image:
        return pixels.decoded(image, mode, name)


def read(path: Path, mode: str = "RGB", image_key: str | None = None) -> tuple[PILImage, dict[str, Any]]:
    """``open_image`` and the input's record, from its bytes read once: ``path``, the ``sha256`` of those
    bytes (``digest``'s) and what ``describe`` says."""
    name, missing = f"`{shown(path)}`", "Pass an existing image file."
    data = parts.image_bytes(path, image_key)
    if data is None:  # a file: read at once, and only if that fails asked why (a folder, missing, empty)
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError as exc:
            checked_bytes(path, name, missing, image_key)
            raise unreadable(name, exc) from exc
        if not data:
            checked_bytes(path, name, missing, image_key)
    with opened(path, name, missing, image_key, data) as image:
        plan = pixels.plan_of(image, mode)
        record = {
            "path": shown(path),
            "sha256": hashlib.sha256(data).hexdigest(),
            **pixels.record_of(image, mode, plan),
        }
        return pixels.decoded(image, mode, name, plan), record


def labels(path: Path, label_column: str | None) -> dict[str, Any]:
    """An input's ``label`` (and a tar sample's ``metadata``) as the inputs' records keep them: a sample's
    ``.cls`` / ``.txt`` / ``.json``, a table row's ``label_column``; {} for a file (a class folder's label is
    its folder's name: ``classfolders``)."""
    return parts.label(path, label_column)
