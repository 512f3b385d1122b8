"""The work behind the forward pass runs at a lower CPU priority (``hookdump/priority.py``): the writer
thread and the decoding workers, never the thread that runs the model; the files are the same."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookdump import api, priority

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread priority is Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _lowered(before: int) -> int:
    return min(19, before + priority.STEP)


def test_the_writer_thread_runs_at_a_lower_priority_and_the_caller_keeps_its_own(
    tmp_path: Path, photos: Path
) -> None:
    seen: list[tuple[str, int]] = []
    before = _nice()
    api.capture(
        [str(photos)], ["layer1"], model="test_resnet", out=tmp_path / "out", batch_size=1, workers=0,
        on_batch=lambda *_: seen.append((threading.current_thread().name, _nice())),
    )  # fmt: skip
    assert len(seen) == 3  # one call per batch, on the writer thread
    assert {name for name, _ in seen} == {"hookdump-writer"}
    assert {nice for _, nice in seen} == {_lowered(before)}
    assert _nice() == before  # the caller's thread: untouched


class _RecordingTransform:
    """The eval transform of test_resnet's input size; writes the priority of the process it runs in."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, image: Image.Image) -> torch.Tensor:
        (self.folder / f"{os.getpid()}-{_nice()}").touch()
        pixels = np.asarray(image.convert("RGB").resize((160, 160)), np.float32) / 255.0
        return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()


def test_decoding_workers_run_at_a_lower_priority_and_decode_the_same(
    tmp_path: Path, photos: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))  # AF_UNIX paths of the workers (conftest)
    marks = tmp_path / "marks"
    marks.mkdir()
    before = _nice()
    outs = {}
    for workers in (0, 1):
        outs[workers] = tmp_path / f"w{workers}"
        api.capture(
            [str(photos)], ["layer1"], model="test_resnet", out=outs[workers], batch_size=1, workers=workers,
            transform=_RecordingTransform(marks),
        )  # fmt: skip
    made = [name.split("-") for name in os.listdir(marks)]
    in_process = {int(nice) for pid, nice in made if int(pid) == os.getpid()}
    in_workers = {int(nice) for pid, nice in made if int(pid) != os.getpid()}
    assert in_process == {before} and in_workers == {_lowered(before)}, made
    assert (outs[0] / "layer1.npy").read_bytes() == (outs[1] / "layer1.npy").read_bytes()
