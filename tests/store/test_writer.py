"""The writer on its own: batches streamed to disk as they come, all-or-nothing output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hookdump.errors import LayerError
from hookdump.store.folder.captured import Captured
from hookdump.store.folder.writer import Writer
from hookdump.store.formats.npy import HEADER_BYTES

KEY = ("blocks.0", "output", None, 0)


def test_batches_are_on_disk_before_the_commit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    parts = [torch.randn(2, 3, 4) for _ in range(3)]
    with Writer(out, ("npy", "pt", "safetensors")) as writer:
        for i, part in enumerate(parts, 1):
            writer.tensors.append({KEY: part})
            stream = writer.tensors.files[KEY].path
            assert stream.stat().st_size == HEADER_BYTES + i * part.numel() * 4  # nothing kept in memory
        saved = writer.commit([Captured(*KEY, calls_per_forward=1)], {"model": "x"})
    expected = torch.cat(parts).numpy()
    np.testing.assert_array_equal(np.load(out / "blocks.0.npy"), expected)
    np.testing.assert_array_equal(torch.load(out / "blocks.0.pt").numpy(), expected)
    np.testing.assert_array_equal(load_file(out / "tensors.safetensors")["blocks.0"].numpy(), expected)
    assert [s.shape for s in saved] == [[6, 3, 4]] * 3
    assert sorted(p.name for p in out.iterdir()) == [
        "blocks.0.npy",
        "blocks.0.pt",
        "manifest.json",
        "tensors.safetensors",
    ]
    assert json.loads((out / "manifest.json").read_text())["model"] == "x"


def test_bfloat16_kept_round_trips_through_the_stream(tmp_path: Path) -> None:
    values = torch.randn(2, 5).to(torch.bfloat16)
    with Writer(tmp_path / "out", ("pt",), save_dtype="keep") as writer:
        writer.tensors.append({KEY: values[:1]})
        writer.tensors.append({KEY: values[1:]})
        (saved,) = writer.commit([Captured(*KEY, calls_per_forward=1)], {})
    loaded = torch.load(tmp_path / "out" / "blocks.0.pt")
    assert loaded.dtype == torch.bfloat16 and torch.equal(loaded, values)
    assert (saved.dtype, saved.source_dtype) == ("bfloat16", "bfloat16")


def test_an_error_leaves_no_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(LayerError, match="cannot be stacked"), Writer(out, ("npy",)) as writer:
        writer.tensors.append({KEY: torch.zeros(1, 3)})
        writer.tensors.append({KEY: torch.zeros(1, 4)})  # another trailing shape
    assert not out.exists()
    existing = tmp_path / "kept"
    (existing / "notes.txt").parent.mkdir()
    (existing / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError), Writer(existing, ("npy",)) as writer:
        writer.tensors.append({KEY: torch.zeros(1, 3)})
        raise RuntimeError("forward failed")
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]
