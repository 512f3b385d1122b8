"""The inputs' table written as a capture's batches land (``inputrows.Rows``): a row group as soon as one
is full, the rest at ``close``; labels that turn out to be text start the table again from the journal. Read
back with pyarrow alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from hookdump.store.folder import inputrows, inputtable


def record(i: int, label: Any = None) -> dict[str, Any]:
    found = {"path": f"shard.tar::k{i}", "sha256": f"{i:064x}", "mode": "RGB", "size": [16 + i, 8]}
    return found | ({} if label is None else {"label": label})


@pytest.fixture
def small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputrows, "ROW_GROUP", 3)


@pytest.mark.usefixtures("small_groups")
def test_row_groups_are_written_as_the_records_come(tmp_path: Path) -> None:
    added = [record(i, i % 2) for i in range(7)]
    rows = inputrows.Rows(tmp_path / "inputs.parquet", lambda: added)
    rows.add(added[:2])
    assert (rows.written, rows.rows) == (0, 2)  # a row group waits until it is full
    rows.add(added[2:5])
    assert (rows.written, rows.rows) == (3, 5)
    size = (tmp_path / "inputs.parquet").stat().st_size
    assert size > 0  # on disk already, before the footer
    rows.add(added[5:])
    kept = rows.close()
    file = pq.ParquetFile(tmp_path / "inputs.parquet")
    assert file.metadata.num_row_groups == 3
    table = file.read().to_pylist()
    assert [(r["row"], r["source"], r["key"], r["label"], r["width"]) for r in table] == [
        (i, "shard.tar", f"k{i}", i % 2, 16 + i) for i in range(7)
    ]
    assert kept["count"] == 7 and kept["table"] == "inputs.parquet"


@pytest.mark.usefixtures("small_groups")
def test_a_text_label_after_integers_writes_the_table_again(tmp_path: Path) -> None:
    journal: list[dict[str, Any]] = []
    rows = inputrows.Rows(tmp_path / "inputs.parquet", lambda: list(journal))
    for batch in (
        [record(0, 5), record(1), record(2, 7)],
        [record(3, 8)],
        [record(4, "n0144"), record(5, 1)],
    ):
        journal += batch  # the capture's journal is ahead of the table
        rows.add(batch)
    rows.close()
    table = pq.read_table(tmp_path / "inputs.parquet").to_pylist()
    assert [r["label"] for r in table] == ["5", None, "7", "8", "n0144", "1"]
    assert [r["row"] for r in table] == list(range(6))


def test_a_text_label_in_the_last_rows_and_no_rows_at_all(tmp_path: Path) -> None:
    records = [record(0, 1), record(1, "cat")]
    rows = inputrows.Rows(tmp_path / "a.parquet", lambda: records)
    rows.add(records)
    rows.close()
    assert [r["label"] for r in pq.read_table(tmp_path / "a.parquet").to_pylist()] == ["1", "cat"]
    empty = inputrows.Rows(tmp_path / "b.parquet", list)
    assert empty.close()["count"] == 0
    assert pq.read_table(tmp_path / "b.parquet").num_rows == 0


def test_a_file_name_that_is_not_utf8_keeps_the_records_in_the_manifest(tmp_path: Path) -> None:
    """Parquet strings are UTF-8: a name holding an undecodable byte (``\\udcff`` as Python reads it) keeps
    the records in the manifest, with a note naming the first such file; other names go to the table."""
    good = [str(tmp_path / f"{i}.png") for i in range(5)]
    assert inputrows.kept_in_manifest(good) is None
    bad = str(tmp_path / "caf\udcff.png")
    note = inputrows.kept_in_manifest([*good, bad, str(tmp_path / "x\udcfe.png")])
    assert note is not None and repr(bad) in note and "\\udcfe" not in note


def _tricky() -> list[dict[str, Any]]:
    """Nulls in every column that has them, text that is not ASCII, extras that go to the JSON column."""
    found = [record(i, i if i % 3 else None) for i in range(9)]
    found[1]["path"] = "photos/caf\u00e9 \u732b.png"
    found[2].pop("size")
    found[4].pop("sha256")
    found[5] |= {"conversion": "CMYK to RGB", "exif": "rotated \u00fc"}
    found[6].pop("mode")
    return found


@pytest.mark.parametrize("text", [False, True])
def test_the_columns_equal_pyarrows_own_conversion(text: bool) -> None:
    """The table's columns are made from their buffers (no pandas): the same table, value for value, as
    pyarrow makes from the same Python lists."""
    import pyarrow as pa

    made = inputtable.as_table(_tricky(), 10, text)
    made.validate(full=True)
    theirs = pa.table(
        [pa.array(made.column(i).to_pylist(), f.type) for i, f in enumerate(made.schema)], schema=made.schema
    )
    assert made.equals(theirs)
    rows = made.to_pylist()
    assert [r["row"] for r in rows] == list(range(10, 19))
    assert rows[1]["source"] == "photos/caf\u00e9 \u732b.png" and rows[1]["label"] == ("1" if text else 1)
    assert rows[0]["label"] is None and rows[2]["width"] is None and rows[4]["sha256"] is None
    assert rows[6]["mode"] is None and json.loads(rows[5]["record"])["exif"] == "rotated \u00fc"
    assert rows[8]["key"] == "k8" and rows[8]["source"] == "shard.tar"


def test_writing_the_table_does_not_import_pandas(tmp_path: Path) -> None:
    """pyarrow's conversion of Python lists imports pandas (0.2 s) to ask whether they are its own; a
    capture that writes its table never needs it."""
    table = str(tmp_path / "inputs.parquet")
    code = (
        "import sys; from pathlib import Path; from hookdump.store.folder import inputrows;"
        f"inputrows.write(Path({table!r}), [{{'path': 'a.png', 'label': 'cat'}}]);"
        "print('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    assert pq.read_table(tmp_path / "inputs.parquet").column("label").to_pylist() == ["cat"]
