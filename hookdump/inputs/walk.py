"""A folder walk: the image files under a folder, in the order paths sort, hidden names and the output
folder left out; tuned for 100,000 files (each entry's type from its folder listing)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}


def walk(folder: Path, skip: frozenset[Path], left_out: list[Path]) -> list[Path]:
    """Image files under ``folder``, sorted as paths sort; hidden names (``.x``, AppleDouble ``._x``) and
    ``skip`` left out (the folders of ``skip`` met are added to ``left_out``).

    Symlinked files are taken, symlinked folders are not entered (no loops); an unreadable folder is an error.
    Each entry's type comes from its folder listing: only a symlink costs a stat (100,000 files: 0.3 s).
    """
    found: list[tuple[tuple[str, ...], Path]] = []  # (parts under folder, path): sorts as the paths do

    def visit(here: Path, parts: tuple[str, ...]) -> None:
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise InputError(
                f"Folder `{exc.filename}` cannot be read: {why[:1].lower()}{why[1:]}.",
                "Make it readable (chmod u+rx), or move it out of the input folder.",
            ) from None
        for entry in entries:
            name, link = entry.name, entry.is_symlink()
            path = here / name
            if path.is_dir() if link else entry.is_dir(follow_symlinks=False):  # (a link: its target's)
                if path.resolve() in skip:
                    left_out.append(path)
                elif not name.startswith(".") and not link:
                    visit(path, (*parts, name))
            elif _is_image_name(name) and (path.is_file() if link else entry.is_file(follow_symlinks=False)):
                found.append(((*parts, name), path))  # (a link: to a file, not a dangling one or a loop)

    visit(folder, ())
    return [path for _, path in sorted(found, key=lambda item: item[0])]


def _is_image_name(name: str) -> bool:
    """Not hidden (``.x``, AppleDouble ``._x``), and a suffix hookdump reads."""
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES
