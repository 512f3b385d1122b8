"""Parquet files (one, or a folder of them) and folders that Hugging Face ``datasets`` wrote with
``save_to_disk`` (Arrow files) as inputs. Each row is an input named ``FILE::ROW``; its image is the
``--image-column`` (encoded bytes, or the ``{"bytes", "path"}`` struct ``datasets.Image`` stores; by default
the column named ``image``, else the one binary column there is), its label the ``--label-column``.
pyarrow reads them by row group (Parquet) or record batch (Arrow), memory-mapped, never whole: each process
keeps the last groups it read of the image column. pyarrow is the ``data`` extra, imported here only."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..model import extras
from ..units import first_few
from .shards import SEPARATOR
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


def _pyarrow() -> Any:
    """pyarrow with its ``ipc`` and ``parquet`` modules, or the error naming the extra."""
    pyarrow = extras.need("pyarrow", "Parquet and datasets inputs", "data", "pyarrow")
    for part in ("ipc", "parquet"):
        extras.need(f"pyarrow.{part}", "Parquet and datasets inputs", "data", "pyarrow")
    return pyarrow


def table_files(text: str) -> list[Path]:
    """The data files an input names, in order: the Parquet file, a folder's Parquet files (sorted), or
    a ``save_to_disk`` folder's Arrow files as its ``state.json`` lists them."""
    path = Path(text)
    if not path.exists():
        raise InputError(
            f"Input `{text}` does not exist.",
            "Pass a Parquet file, a folder of them, or a save_to_disk folder.",
        )
    if path.is_file():
        return [path]
    state = path / "state.json"
    if state.is_file():
        try:
            files = [path / f["filename"] for f in json.loads(state.read_text())["_data_files"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(
                f"`{state}` is not a datasets save_to_disk state ({exc}).", "Save the dataset again."
            ) from exc
        return files
    return sorted(p for p in path.iterdir() if p.suffix == ".parquet" and not p.name.startswith("."))


@dataclass(frozen=True)
class Layout:
    """A data file's columns and how its rows fall into groups (row groups, record batches)."""

    columns: dict[str, str]  # name -> pyarrow type, as text
    groups: tuple[int, ...]  # rows in each group

    @property
    def rows(self) -> int:
        return sum(self.groups)


def layout(file: Path) -> Layout:
    stat = file.stat()
    return _layout(str(file), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _layout(file: str, size: int, mtime_ns: int) -> Layout:
    pa = _pyarrow()
    try:
        if file.endswith(".parquet"):
            meta = pa.parquet.ParquetFile(file)
            schema = meta.schema_arrow
            groups = tuple(meta.metadata.row_group(i).num_rows for i in range(meta.metadata.num_row_groups))
        else:
            reader = pa.ipc.open_stream(pa.memory_map(file))
            schema = reader.schema
            groups = tuple(batch.num_rows for batch in reader)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(
            f"`{file}` is not a {'Parquet' if file.endswith('.parquet') else 'datasets Arrow'} file hookdump"
            f" can read: {exc}.",
            "Write it again (a cut-short download or copy: fetch it again).",
        ) from exc
    return Layout({f.name: str(f.type) for f in schema}, groups)


def image_column(file: Path, wanted: str | None) -> str:
    """The column that holds a file's images: ``wanted``, else ``image``, else its one binary column;
    one that is not there, or holds no bytes, is an error listing the columns."""
    columns = layout(file).columns
    if wanted is None:
        binary = [n for n, k in columns.items() if _holds_bytes(k)]
        wanted = "image" if "image" in columns else (binary[0] if len(binary) == 1 else None)
        if wanted is None:
            raise InputError(
                f"`{file}` has no column named `image` and {len(binary)} binary columns: which holds the"
                " images?",
                f"Name it with --image-column; its columns: {_listed(columns)}.",
            )
    if wanted not in columns:
        raise InputError(
            f"`{file}` has no column `{wanted}`; its columns: {_listed(columns)}.",
            "Name one of them with --image-column.",
        )
    if not _holds_bytes(columns[wanted]):
        raise InputError(
            f"Column `{wanted}` of `{file}` holds {columns[wanted]}, not encoded images (bytes, or"
            " datasets.Image's {bytes, path} struct).",
            f"Name the column of image bytes with --image-column; its columns: {_listed(columns)}.",
        )
    return wanted


def _listed(columns: dict[str, str]) -> str:
    """``name (type), ...``: the columns an error lists (made only for one)."""
    return ", ".join(f"{name} ({kind})" for name, kind in columns.items())


def _holds_bytes(kind: str) -> bool:
    return kind in ("binary", "large_binary") or (
        kind.startswith("struct<") and "bytes: binary" in kind.replace("large_", "")
    )


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


def _group_of(file: Path, row: int) -> tuple[int, int]:
    """(group, row within it)."""
    start = 0
    for index, count in enumerate(layout(file).groups):
        if row < start + count:
            return index, row - start
        start += count
    raise InputError(f"`{file}{SEPARATOR}{row}`: the file holds {start} rows.", "Pass rows the file holds.")


@functools.lru_cache(maxsize=2)
def _group(file: str, size: int, mtime_ns: int, group: int, column: str) -> Any:
    """One group of one column (the last two read stay: a batch's rows are one group, mostly)."""
    pa = _pyarrow()
    if file.endswith(".parquet"):
        return pa.parquet.ParquetFile(file).read_row_group(group, columns=[column]).column(column)
    reader = pa.ipc.open_stream(pa.memory_map(file))
    for index, batch in enumerate(reader):
        if index == group:
            return batch.column(column)
    raise IndexError(group)


def _cell(path: Path | str, column: str) -> Any:
    file, row = split(path)
    group, offset = _group_of(file, row)
    stat = file.stat()
    return _group(str(file), stat.st_size, stat.st_mtime_ns, group, column)[offset].as_py()


def image_bytes(path: Path | str, wanted: str | None = None) -> bytes:
    """The encoded image of row ``FILE::ROW``."""
    file, _ = split(path)
    column = image_column(file, wanted)
    value = _cell(path, column)
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
    return {} if column is None else {"label": _cell(path, column)}


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
