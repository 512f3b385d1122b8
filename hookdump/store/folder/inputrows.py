"""``inputs.parquet`` written as a capture's batches land (:class:`Rows`: a row group as soon as one is full,
the footer at the end), or whole from a list of records (``merge``); and whether the records can go in a
table at all (pyarrow there, every name text), else they stay in the manifest, and a note says why."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...digest import sha256
from .inputtable import TABLE, as_table, pyarrow_modules, schema, whole

ROW_GROUP = 65536  # rows a row group of the table holds
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
        text = not whole(group)
        if self._writer is None:
            pa, pq = pyarrow_modules()
            self.text = bool(self.text or text)
            # Python's own open (a folder name of any bytes); closed by ``discard``.
            self._file = open(self.path, "wb")  # noqa: SIM115
            self._writer = pq.ParquetWriter(self._file, schema(pa, self.text), use_dictionary=_REPEATED)
        elif text and not self.text:
            return False
        self._writer.write_table(as_table(group, self.written, bool(self.text)), row_group_size=ROW_GROUP)
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
