"""A table's files read with pyarrow (the data extra, imported here only): which data files an input names,
each file's layout (its columns, its rows in row groups or record batches; cached by size and mtime), the
column that holds its images, and one cell read by its group (the last two groups read stay)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..model import extras
from .shards import SEPARATOR


def pyarrow_module() -> Any:
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
    pa = pyarrow_module()
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
    pa = pyarrow_module()
    if file.endswith(".parquet"):
        return pa.parquet.ParquetFile(file).read_row_group(group, columns=[column]).column(column)
    reader = pa.ipc.open_stream(pa.memory_map(file))
    for index, batch in enumerate(reader):
        if index == group:
            return batch.column(column)
    raise IndexError(group)


def cell(file: Path, row: int, column: str) -> Any:
    """The value in ``column`` of row ``row`` of ``file``."""
    group, offset = _group_of(file, row)
    stat = file.stat()
    return _group(str(file), stat.st_size, stat.st_mtime_ns, group, column)[offset].as_py()
