"""Class folders (torchvision's ImageFolder layout: ``val/n01440764/*.JPEG``): a folder given as input that
holds no image of its own, only subfolders of them, names each image's label: its first subfolder."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..units import first_few


def labels(paths: list[Path], given: tuple[str, ...], suffixes: set[str]) -> dict[str, str]:
    """Each input's class name (by its path), for inputs under a given folder in that layout."""
    folders = [
        Path(text) for text in given if Path(text).is_dir() and _is_class_folder(text, frozenset(suffixes))
    ]
    found: dict[str, str] = {}
    for path in paths:
        for folder in folders:
            try:
                parts = path.relative_to(folder).parts
            except ValueError:
                continue
            if len(parts) >= 2:
                found[str(path)] = parts[0]
                break
    return found


@functools.lru_cache(maxsize=64)
def _is_class_folder(folder: str, suffixes: frozenset[str]) -> bool:
    """No image directly in ``folder`` (hidden names aside), at least one subfolder; read only until the
    first image (a folder of a million photos is not listed again)."""
    subfolder = False
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_file() and Path(entry.name).suffix.lower() in suffixes:
                return False
            subfolder = subfolder or entry.is_dir()
    return subfolder


def note(records: list[dict[str, object]]) -> list[str]:
    """``labels: 6 input(s) have one (3 distinct: cat, dog, ...), in the inputs' records``: of class
    folders or tar shards' ``.cls`` members."""
    found = [r["label"] for r in records if "label" in r]
    if not found:
        return []
    names = sorted({str(label) for label in found})
    return [
        f"labels: {len(found)} input(s) have one ({len(names)} distinct: {first_few(names)}), from class"
        " folders, .cls members or --label-column; the inputs' records say `label`"
    ]
