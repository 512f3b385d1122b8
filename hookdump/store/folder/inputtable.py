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
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...digest import sha256
from ...errors import InputError
from ...inputs.shards import SEPARATOR
from ...model import extras

TABLE = "inputs.parquet"
ROW_GROUP = 65536  # rows a row group of the table holds
_OWN = frozenset(("path", "sha256", "mode", "size", "label"))  # the record's keys with columns of their own
_REPEATED = ["label", "width", "height", "mode", "record"]  # columns whose values repeat: dictionary-encoded


def kept_in_manifest(paths: Iterable[str]) -> str | None:
    """Why the records of inputs at ``paths`` stay in the manifest (a note), or None when the table takes
    them: pyarrow missing, or a path that is no text (a file name of bytes that are not UTF-8 cannot be a
    Parquet string)."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return "the inputs' records are in the manifest: pyarrow (the data extra) would write inputs.parquet"
    names = paths if isinstance(paths, list) else list(paths)
    try:
        "".join(names).encode("utf-8")  # (100,000 names: 3 ms; one by one: 70)
    except UnicodeEncodeError:
        name = next(name for name in names if not _is_text(name))
        return (
            "the inputs' records are in the manifest, not inputs.parquet:"
            f" `{name!r}` is a file name that is not UTF-8 text"
        )
    return None


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _pyarrow() -> tuple[Any, Any]:
    pa = extras.need("pyarrow", "Captures with an inputs.parquet table", "data", "pyarrow")
    return pa, extras.need("pyarrow.parquet", "Captures with an inputs.parquet table", "data", "pyarrow")


class Rows:
    """The table at ``path``, written as records come (a capture's batches as they land): a row group as
    soon as there are ``ROW_GROUP`` rows waiting, the rest and the footer at ``close``. Nothing before
    ``close`` can be read back (no footer): an interrupted capture's table is written again from its
    journal. The ``label`` column holds integers when the first row group's labels are all integers (or
    none), else text; a text label after that writes the table again, labels as text, from ``replay``
    (every record added so far, in order: the capture's journal, which is ahead of the table)."""

    def __init__(self, path: Path, replay: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self.path, self.replay = path, replay
        self.written = 0  # rows in the row groups written
        self.waiting: list[dict[str, Any]] = []
        self.text: bool | None = None  # the label column's type: text, or integers; None until known
        self._file: Any = None  # the open file and its pyarrow ParquetWriter
        self._writer: Any = None

    @property
    def rows(self) -> int:
        """Records added."""
        return self.written + len(self.waiting)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Add records (in order); a row group is written when ``ROW_GROUP`` rows wait."""
        self.waiting.extend(records)
        while len(self.waiting) >= ROW_GROUP:
            group, self.waiting = self.waiting[:ROW_GROUP], self.waiting[ROW_GROUP:]
            if not self._write(group):
                self._again()
                return

    def close(self) -> dict[str, Any]:
        """Write what waits and the footer; what the manifest keeps of the table."""
        if not self._write(self.waiting):
            self._again()
            self._write(self.waiting)
        self.waiting = []
        self.discard()
        return {"count": self.written, "table": TABLE, "sha256": sha256(self.path)}

    def discard(self) -> None:
        """Close the file as it is (a capture that stops: its journal, not this, is what --resume reads)."""
        if self._writer is not None:
            self._writer.close()
            self._file.close()
        self._writer = self._file = None

    def _write(self, group: list[dict[str, Any]]) -> bool:
        """Write ``group`` as a row group (none when it is empty, but the file's head once); False when its
        labels are text and the column holds integers."""
        if not group and self._writer is not None:
            return True
        text = not _whole(group)
        if self._writer is None:
            pa, pq = _pyarrow()
            self.text = bool(self.text or text)
            # Python's own open (a folder name of any bytes); closed by ``discard``.
            self._file = open(self.path, "wb")  # noqa: SIM115
            self._writer = pq.ParquetWriter(self._file, _schema(pa, self.text), use_dictionary=_REPEATED)
        elif text and not self.text:
            return False
        self._writer.write_table(_as_table(group, self.written, bool(self.text)), row_group_size=ROW_GROUP)
        self._file.flush()  # the row group on disk, not in memory
        self.written += len(group)
        return True

    def _again(self) -> None:
        """Start the table again with text labels, from every record added so far."""
        self.discard()
        self.text, self.written, self.waiting = True, 0, []
        self.add(self.replay())


def write(path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The records as the table at ``path``; what the manifest keeps of it."""
    rows = Rows(path, lambda: records)
    rows.add(records)
    return rows.close()


def table(folder: Path, listed: Any) -> Any:
    """A manifest's inputs as the table (a pyarrow Table: ``.to_pandas()``), read from ``folder``'s
    ``inputs.parquet``, or made from the manifest's records (a capture from before the table)."""
    return (
        read(folder, listed)
        if is_table(listed)
        else _as_table(list(listed or []), 0, not _whole(listed or []))
    )


def _whole(records: list[dict[str, Any]]) -> bool:
    """Whether the records' labels are all integers (or absent)."""
    return all(
        isinstance(v, int) and not isinstance(v, bool) for r in records if (v := r.get("label")) is not None
    )


def _schema(pa: Any, text: bool) -> Any:
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


def _as_table(records: list[dict[str, Any]], start: int, text: bool) -> Any:
    """The records as the table's columns, numbered from row ``start``; labels as text or integers."""
    pa, _ = _pyarrow()
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
    schema = _schema(pa, text)
    return pa.table([_array(pa, c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


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
    _, pq = _pyarrow()
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
