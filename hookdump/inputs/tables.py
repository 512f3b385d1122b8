"""Parquet files (one, or a folder of them) and folders that Hugging Face ``datasets`` wrote with
``save_to_disk`` (Arrow files) as inputs. Each row is an input named ``FILE::ROW``; its image is the
``--image-column`` (encoded bytes, or the ``{"bytes", "path"}`` struct ``datasets.Image`` stores; by default
the column named ``image``, else the one binary column there is), its label the ``--label-column``.
pyarrow reads them by row group (Parquet) or record batch (Arrow), memory-mapped, never whole: each process
keeps the last groups it read of the image column (:mod:`.tablefiles`, where pyarrow, the ``data`` extra,
is imported). A kind of :mod:`.parts`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..units import first_few
from .shards import SEPARATOR
from .tablefiles import cell, image_column, layout, table_files
from .walk import IMAGE_SUFFIXES

if TYPE_CHECKING:
    from .spec import InputSpec

SUFFIXES = (".parquet", ".arrow")


def names(text: str, listed: bool = False) -> bool:
    """Whether an input names a Parquet file, a folder of them (and of no image), or a ``save_to_disk``
    folder (``listed``: a line of an ``@list`` file, a Parquet file only: no line is looked up on disk)."""
    path = Path(text)
    if path.suffix.lower() == ".parquet":
        return True
    if listed or not path.is_dir():
        return False
    if (path / "state.json").is_file():
        return True
    parquet = False
    with os.scandir(path) as entries:  # a folder of 100,000 images: its first image decides
        for entry in entries:
            suffix = os.path.splitext(entry.name)[1].lower()
            if suffix in IMAGE_SUFFIXES and entry.is_file():
                return False
            parquet = parquet or (suffix == ".parquet" and entry.is_file())
    return parquet


def is_part(path: Path | str) -> bool:
    """Whether an input address is a row of a table (``FILE::ROW``)."""
    file, sep, row = str(path).rpartition(SEPARATOR)
    return bool(sep) and row.isdigit() and Path(file).suffix.lower() in SUFFIXES


def holds(path: Path | str) -> bool:
    """Whether the row ``FILE::ROW`` is there to be read (its file there, holding that many rows)."""
    file, row = split(path)
    try:
        return file.is_file() and row < layout(file).rows
    except InputError:
        return False


def addresses(text: str, spec: InputSpec) -> list[Path]:
    """Every row of the files ``text`` names, as ``FILE::ROW``; their columns (``--image-column``,
    ``--label-column``) checked first."""
    wanted, label = spec.image_column, spec.label_column
    found: list[Path] = []
    files = table_files(text)
    if not files:
        raise InputError(
            f"Folder `{text}` holds no Parquet file.",
            "Pass a folder of .parquet files, or a save_to_disk folder.",
        )
    for file in files:
        image_column(file, wanted)
        columns = layout(file).columns
        if label is not None and label not in columns:
            raise InputError(
                f"`{file}` has no column `{label}` (--label-column); its columns: {', '.join(columns)}.",
                "Name one of them, or drop --label-column.",
            )
        rows = layout(file).rows
        if not rows:
            raise InputError(f"`{file}` holds no row.", "Leave it out of the inputs.")
        found += [Path(f"{file}{SEPARATOR}{row}") for row in range(rows)]
    return found


def split(path: Path | str) -> tuple[Path, int]:
    file, _, row = str(path).rpartition(SEPARATOR)
    return Path(file), int(row)


def image_bytes(path: Path | str, wanted: str | None = None) -> bytes:
    """The encoded image of row ``FILE::ROW``."""
    file, _ = split(path)
    column = image_column(file, wanted)
    value = cell(*split(path), column)
    if isinstance(value, dict):
        value = value.get("bytes")
    if not isinstance(value, bytes) or not value:
        raise InputError(
            f"`{path}` holds no image bytes in column `{column}` (an empty cell, or an image stored by"
            " path).",
            "Embed the images' bytes (datasets: cast_column(..., Image()) before saving), or leave the row"
            " out (--skip-bad records it).",
        )
    return value


def label(path: Path | str, column: str | None = None) -> dict[str, Any]:
    """A row's ``label`` from the ``--label-column``, as the inputs' records keep it."""
    return {} if column is None else {"label": cell(*split(path), column)}


def note_columns(paths: list[Path], wanted: str | None) -> list[str]:
    """Which column the images were read from, per file (a note when it was not given)."""
    files = list(dict.fromkeys(split(p)[0] for p in paths if is_part(p)))
    if not files or wanted is not None:
        return []
    chosen = sorted({image_column(f, None) for f in files})
    return [
        f"images read from column {', '.join(chosen)} of {first_few([str(f) for f in files])}"
        " (--image-column to choose)"
    ]
