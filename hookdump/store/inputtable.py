"""The inputs' records as a table beside the tensors, ``inputs.parquet``, not a list in the manifest: a
million inputs' records would make the manifest hundreds of MB that every reader parses whole. One row an
input: ``row``, ``source`` (the file, shard or table it came from), ``key`` (the sample's key in a shard, the
row in a table; empty for a file), ``label``, ``sha256``, ``width``, ``height``, ``mode``, and ``record``
(what else the manifest used to say of it, as JSON: a conversion, EXIF, frames, a sample's metadata). The
manifest keeps ``{"count", "table", "sha256"}``. pyarrow writes and reads it (the data extra): without it a
capture keeps the records in the manifest, as captures before this table did, and says so; every reader
takes both (:func:`records`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..digest import sha256
from ..errors import InputError
from ..inputs.shards import SEPARATOR
from ..model import extras

TABLE = "inputs.parquet"
_OWN = ("path", "sha256", "mode", "size", "label")  # the record's keys that have columns of their own


def kept_in_manifest(records: list[dict[str, Any]]) -> str | None:
    """Why these records stay in the manifest (a note), or None when the table takes them: pyarrow missing,
    or a path that is no text (a file name of bytes that are not UTF-8 cannot be a Parquet string)."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return "the inputs' records are in the manifest: pyarrow (the data extra) would write inputs.parquet"
    for record in records:
        try:
            str(record.get("path", "")).encode("utf-8")
        except UnicodeEncodeError:
            return (
                "the inputs' records are in the manifest, not inputs.parquet:"
                f" `{record['path']!r}` is a file name that is not UTF-8 text"
            )
    return None


def _pyarrow() -> tuple[Any, Any]:
    pa = extras.need("pyarrow", "Captures with an inputs.parquet table", "data", "pyarrow")
    return pa, extras.need("pyarrow.parquet", "Captures with an inputs.parquet table", "data", "pyarrow")


def write(path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The records as the table at ``path``; what the manifest keeps of it."""
    _, pq = _pyarrow()
    with open(path, "wb") as file:  # (Python's own open: a folder name of any bytes)
        pq.write_table(_as_table(records), file, row_group_size=65536)
    return {"count": len(records), "table": TABLE, "sha256": sha256(path)}


def table(folder: Path, listed: Any) -> Any:
    """A manifest's inputs as the table (a pyarrow Table: ``.to_pandas()``), read from ``folder``'s
    ``inputs.parquet``, or made from the manifest's records (a capture from before the table)."""
    return read(folder, listed) if is_table(listed) else _as_table(list(listed or []))


def _as_table(records: list[dict[str, Any]]) -> Any:
    """The records as the table's columns."""
    pa, _ = _pyarrow()
    sources, keys = [], []
    for record in records:
        source, _, key = str(record.get("path", "")).partition(SEPARATOR)
        sources.append(source)
        keys.append(key)
    labels = [r.get("label") for r in records]
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in labels if v is not None)
    columns = {
        "row": pa.array(range(len(records)), pa.int64()),
        "source": pa.array(sources, pa.string()),
        "key": pa.array(keys, pa.string()),
        "label": pa.array(labels if whole else [None if v is None else str(v) for v in labels],
                          pa.int64() if whole else pa.string()),
        "sha256": pa.array([r.get("sha256") for r in records], pa.string()),
        "width": pa.array([(r.get("size") or [None, None])[0] for r in records], pa.int64()),
        "height": pa.array([(r.get("size") or [None, None])[1] for r in records], pa.int64()),
        "mode": pa.array([r.get("mode") for r in records], pa.string()),
        "record": pa.array([json.dumps({k: v for k, v in r.items() if k not in _OWN}) for r in records]),
    }  # fmt: skip
    return pa.table(columns)


def is_table(listed: Any) -> bool:
    """Whether a manifest's ``inputs`` points at the table (not a list of records)."""
    return isinstance(listed, dict) and "table" in listed


def count(listed: Any) -> int:
    """How many inputs a manifest's ``inputs`` holds, without reading a table."""
    if is_table(listed):
        return int(listed.get("count") or 0)
    return len(listed or [])


def records(folder: Path, listed: Any) -> list[dict[str, Any]]:
    """A manifest's inputs as records, from its list, or from its table in ``folder`` (checked against its
    sha256)."""
    if not is_table(listed):
        return list(listed or [])
    table = read(folder, listed).to_pylist()
    found = []
    for row in table:
        record: dict[str, Any] = {"path": row["source"] + (f"{SEPARATOR}{row['key']}" if row["key"] else "")}
        if row["sha256"] is not None:
            record["sha256"] = row["sha256"]
        if row["mode"] is not None:
            record["mode"] = row["mode"]
        if row["width"] is not None:
            record["size"] = [row["width"], row["height"]]
        record |= json.loads(row["record"] or "{}")
        if row["label"] is not None:
            record["label"] = row["label"]
        found.append(record)
    return found


def read(folder: Path, listed: dict[str, Any]) -> Any:
    """The table itself (a pyarrow Table: ``.to_pandas()``), refused when it is missing or holds another
    number of rows than the manifest says."""
    _, pq = _pyarrow()
    path = folder / str(listed.get("table", TABLE))
    if not path.is_file():
        raise InputError(
            f"`{path}` is named in the manifest but missing.", "Capture again, or restore the file."
        )
    with open(path, "rb") as file:  # (ParquetFile: read_table would load pyarrow's dataset machinery)
        table = pq.ParquetFile(file).read()
    if table.num_rows != count(listed):  # (its sha256 is in the manifest for a full check; rows are cheap)
        raise InputError(
            f"`{path}` holds {table.num_rows} rows, and the manifest says {count(listed)} inputs.",
            "Capture again, or restore the file.",
        )
    return table
