"""The registry of inputs that are a part of a file (``inputs/parts.py``): every kind gives the whole
``Kind`` interface, and an address is told to the right kind, a plain file to none."""

from __future__ import annotations

import inspect
from pathlib import Path

from hookdump.inputs import parts, shards, tables
from hookdump.inputs.parts import Kind


def test_every_registered_kind_gives_the_whole_interface() -> None:
    wanted = {
        name: inspect.signature(member)
        for name, member in vars(Kind).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    assert set(wanted) == {"names", "addresses", "is_part", "split", "holds", "image_bytes", "label"}
    for kind in parts.KINDS:
        for name, signature in wanted.items():
            given = inspect.signature(getattr(kind, name))
            assert len(given.parameters) == len(signature.parameters) - 1, (kind, name)  # less ``self``


def test_an_address_goes_to_its_kind_and_a_file_to_none(tmp_path: Path) -> None:
    assert parts.kind_of(tmp_path / "a.png") is None
    assert parts.kind_of(f"{tmp_path}/s.tar::k1") is shards
    assert parts.kind_of(f"{tmp_path}/t.parquet::3") is tables
    assert parts.kind_of(f"{tmp_path}/odd.png::3") is None  # the separator alone makes no part
    assert parts.container(Path(f"{tmp_path}/s.tar::k1")) == tmp_path / "s.tar"
    assert parts.named("train-{000..009}.tar") is shards and parts.named("x.parquet") is tables
    assert parts.named(str(tmp_path)) is None  # an empty folder: no table
    assert not parts.holds(Path(f"{tmp_path}/missing.tar::k")) and not parts.holds(tmp_path / "b.png")
