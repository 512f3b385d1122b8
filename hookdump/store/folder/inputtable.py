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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InputError
from ...inputs.shards import SEPARATOR
from ...model import extras

TABLE = "inputs.parquet"

_OWN = frozenset(("path", "sha256", "mode", "size", "label"))  # the record's keys with columns of their own


def pyarrow_modules() -> tuple[Any, Any]:
    pa = extras.need("pyarrow", "Captures with an inputs.parquet table", "data", "pyarrow")
    return pa, extras.need("pyarrow.parquet", "Captures with an inputs.parquet table", "data", "pyarrow")


def table(folder: Path, listed: Any) -> Any:
    """A manifest's inputs as the table (a pyarrow Table: ``.to_pandas()``), read from ``folder``'s
    ``inputs.parquet``, or made from the manifest's records (a capture from before the table)."""
    return (
        read(folder, listed) if is_table(listed) else as_table(list(listed or []), 0, not whole(listed or []))
    )


def whole(records: list[dict[str, Any]]) -> bool:
    """Whether the records' labels are all integers (or absent)."""
    return all(
        isinstance(v, int) and not isinstance(v, bool) for r in records if (v := r.get("label")) is not None
    )


def schema(pa: Any, text: bool) -> Any:
    """The table's columns and their types."""
    return pa.schema(
        [
            ("row", pa.int64()), ("source", pa.string()), ("key", pa.string()),
            ("label", pa.string() if text else pa.int64()), ("sha256", pa.string()), ("width", pa.int64()),
            ("height", pa.int64()), ("mode", pa.string()), ("record", pa.string()),
        ]
    )  # fmt: skip


def _more(record: dict[str, Any]) -> dict[str, Any]:
    """What a record says besides the table's own columns (the ``record`` column, as JSON)."""
    return {} if record.keys() <= _OWN else {k: v for k, v in record.items() if k not in _OWN}


def as_table(records: list[dict[str, Any]], start: int, text: bool) -> Any:
    """The records as the table's columns, numbered from row ``start``; labels as text or integers."""
    pa, _ = pyarrow_modules()
    paths = [str(r.get("path", "")) for r in records]
    if any(SEPARATOR in path for path in paths):
        parted = [path.partition(SEPARATOR) for path in paths]
        sources, keys = [source for source, _, _ in parted], [key for _, _, key in parted]
    else:  # files: no key
        sources, keys = paths, [""] * len(paths)
    sizes = [r.get("size") or (None, None) for r in records]
    labels = [r.get("label") for r in records]
    columns = [
        range(start, start + len(records)), sources, keys,
        [None if v is None else str(v) for v in labels] if text else labels,
        [r.get("sha256") for r in records], [w for w, _ in sizes], [h for _, h in sizes],
        [r.get("mode") for r in records],
        [json.dumps(more) if (more := _more(r)) else "{}" for r in records],
    ]  # fmt: skip
    kinds = schema(pa, text)
    return pa.table([_array(pa, c, f.type) for c, f in zip(columns, kinds, strict=True)], schema=kinds)


def _array(pa: Any, values: Sequence[Any], kind: Any) -> Any:
    """A column of integers or text (None: null), made from its buffers: pyarrow's conversion of Python
    objects first imports pandas (0.2 s a capture) to ask whether they are pandas'."""
    count, nulls, bitmap = len(values), values.count(None), None
    if nulls:
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=count)
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if kind == pa.int64():
        data = (
            np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=count)
            if nulls
            else np.array(values, dtype=np.int64)
        )
        return pa.Array.from_buffers(kind, count, [bitmap, pa.py_buffer(data)], null_count=nulls)
    texts = ["" if v is None else v for v in values] if nulls else values
    joined = "".join(texts)
    encoded = joined.encode("utf-8")
    sizes = map(len, texts) if len(encoded) == len(joined) else (len(t.encode("utf-8")) for t in texts)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.fromiter(sizes, dtype=np.int64, count=count), out=offsets[1:])
    if offsets[-1] >= 2**31:  # more than a string column's 32-bit offsets reach (no capture's records do)
        return pa.array(values, kind)
    buffers = [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(encoded)]
    return pa.Array.from_buffers(kind, count, buffers, null_count=nulls)


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
    _, pq = pyarrow_modules()
    path = folder / str(listed.get("table", TABLE))
    if not path.is_file():
        raise InputError(
            f"`{path}` is named in the manifest but missing.", "Capture again, or restore the file."
        )
    # ParquetFile: read_table would load pyarrow's dataset machinery. One thread: pyarrow's thread pool,
    # having read through a Python file object, can hang or abort the interpreter's exit (apache/arrow#50482).
    with open(path, "rb") as file:
        table = pq.ParquetFile(file).read(use_threads=False)
    if table.num_rows != count(listed):  # (its sha256 is in the manifest for a full check; rows are cheap)
        raise InputError(
            f"`{path}` holds {table.num_rows} rows, and the manifest says {count(listed)} inputs.",
            "Capture again, or restore the file.",
        )
    return table
