"""The writer's queue, bounded in bytes (``capture/behind.py``, ``--max-queue-mb``): ``put`` waits while the
writer holds more than the bound, the writer lets go of each tensor once it is on disk, and a capture under
any bound saves what a hand-written hook sees, with the bound and the most the writer held in the manifest."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import hooked
from slow_runs import mixed_photos

from hookdump.capture import copies
from hookdump.capture.behind import QUEUE_SHARE, Behind
from hookdump.units import available_memory

LAYERS = ["layer1", "layer2"]
ROW_BYTES = 4 * (64 * 56 * 56 + 128 * 28 * 28)  # resnet18 at 224: layer1 (64, 56, 56), layer2 (128, 28, 28)


def test_put_waits_while_the_writer_holds_more_than_the_bound() -> None:
    go = threading.Event()
    done: list[str] = []
    behind: Behind

    def work(item: str) -> None:
        go.wait()
        behind.release(60)  # a tensor of the item on disk and dropped
        done.append(item)

    behind = Behind(work, max_bytes=150)
    behind.put("a", 100)  # 100 <= 150: returns while "a" is still in work
    assert behind.held == 100 and done == []
    second = threading.Thread(target=behind.put, args=("b", 100))
    second.start()
    second.join(0.3)
    assert second.is_alive()  # 200 held > 150: waits for the writer (blocked on `go`)
    go.set()
    second.join(10)
    assert not second.is_alive()
    behind.close()
    assert done == ["a", "b"] and behind.held == 0 and behind.peak == 200


def test_a_bound_of_zero_writes_each_item_before_put_returns() -> None:
    done: list[int] = []
    behind = Behind(done.append, max_bytes=0)
    for i in range(20):
        behind.put(i, 10)
        assert done == list(range(i + 1))  # on disk before the next batch would run
    behind.close()
    assert behind.peak == 10


def test_without_a_byte_bound_at_most_depth_items_are_behind() -> None:
    go = threading.Event()
    behind = Behind(lambda item: go.wait(), max_bytes=None, depth=2)
    behind.put(0, 1)
    behind.put(1, 1)  # one in work, one waiting: still within the depth
    third = threading.Thread(target=behind.put, args=(2, 1))
    third.start()
    third.join(0.3)
    assert third.is_alive()
    go.set()
    third.join(10)
    behind.close()
    assert not third.is_alive() and behind.held == 0


def test_an_error_in_the_writer_wakes_a_waiting_put() -> None:
    def fail(item: int) -> None:
        raise OSError(28, "No space left on device")

    behind = Behind(fail, max_bytes=0)
    with pytest.raises(OSError, match="No space left"):
        behind.put(0, 10)
    behind.close(errors=False)


def test_copies_go_from_their_hooks_from_the_one_past_the_bound_but_never_after_a_reference() -> None:
    """``Copies.offer``: in a pass, the copies within the bound wait for its end, the one that takes it past
    the bound and every later one go to ``hand`` at once (the first pass too). A pass that kept a tensor by
    reference before reaching the bound hands nothing: ``settle`` may run it again."""
    if copies._SHARERS is None:
        pytest.skip("this torch has no storage use count: nothing is kept by reference")
    handed: list[tuple[str, ...]] = []
    kept = copies.Copies(grad=False, reduce="none", channels_last=set(), tokens=None)
    kept.offer(lambda key, tensor: handed.append(key), after=6 * 4)  # six float32 values
    a, b, c = (("a", "output", 0, 0), ("b", "output", 0, 0), ("c", "output", 0, 0))
    kept.begin()
    for key, size in ((a, 4), (b, 1), (c, 1)):  # 4 + 1 + 1 values: within the bound, all wait
        kept.keep(key, torch.ones(size))
    kept.end()
    assert (handed, list(kept.drain())) == ([], [a, b, c]) and kept.hand is None
    kept.begin()  # a seen again, kept by reference; b now takes the pass past the bound: still not handed
    for key, size in ((a, 4), (b, 4), (c, 1)):
        kept.keep(key, torch.ones(size))
    kept.end()
    assert kept.settle()
    assert (handed, list(kept.drain())) == ([], [a, b, c]) and kept.hand is None
    fresh = copies.Copies(grad=False, reduce="none", channels_last=set(), tokens=None)
    fresh.offer(lambda key, tensor: handed.append(key), after=6 * 4)
    for _ in range(2):  # the first pass: a waits, b is past the bound, so b and c go; the next: all go
        fresh.begin()
        for key, size in ((a, 4), (b, 4), (c, 1)):
            fresh.keep(key, torch.ones(size))
        fresh.end()
        assert fresh.settle()
        assert list(fresh.drain()) == ([a] if len(handed) == 2 else [])
    assert handed == [b, c, a, b, c] and fresh.hand is not None


@pytest.mark.parametrize(
    "bound", ["0", "0.1", "2", None], ids=["zero", "a tenth of a MB", "between the layers", "default"]
)
def test_a_capture_under_any_bound_saves_what_a_hand_written_hook_sees(
    cli, tmp_path: Path, bound: str | None
) -> None:
    photos = mixed_photos(tmp_path / "photos", 5)  # batches of 2, 2 and 1
    out = tmp_path / "out"
    extra = ["--max-queue-mb", bound] if bound is not None else []
    args = ["capture", photos, "-m", "resnet18", "-l", LAYERS[0], "-l", LAYERS[1], "--batch-size", "2"]
    result = cli(*args, "-o", out, "-q", *extra)
    assert result.exit_code == 0, result.stderr
    for row, photo in enumerate(sorted(photos.iterdir())):
        for layer, expected in hooked("resnet18", LAYERS, photo).items():
            np.testing.assert_allclose(np.load(out / f"{layer}.npy")[row], expected[0], rtol=1e-5, atol=1e-5)
    queue = json.loads((out / "manifest.json").read_text())["writer_queue"]
    batch = 2 * ROW_BYTES
    if bound is None:
        assert 0 < queue["max_bytes"] <= 2 * available_memory() // QUEUE_SHARE
        assert batch <= queue["peak_bytes"] <= 2 * batch  # a batch in work and one waiting, at most
    else:
        assert queue["max_bytes"] == int(float(bound) * 2**20)
    if bound in ("0", "2"):  # "2": layer1's 1.6 MB are within it, with layer2's 0.8 MB not, so in the first
        # batch layer2 goes from its hook and layer1 at the pass's end, while layer2 waits (then each alone)
        assert queue["peak_bytes"] == batch  # "0": the first batch, on disk before the next one is put
    if bound == "0.1":  # layer1's first copy outweighs it: from there on each goes at hook time, alone
        assert queue["peak_bytes"] == 2 * 4 * 64 * 56 * 56
    assert queue["handed_at_hook"] == (bound in ("0.1", "2"))


@pytest.mark.parametrize("value", ["-1", "nan", "lots"])
def test_a_bound_that_is_no_size_is_refused_before_any_work(
    cli, chelsea: Path, tmp_path: Path, value: str
) -> None:
    out = tmp_path / "out"
    result = cli("capture", chelsea, "-m", "resnet18", "-l", "layer1", "-o", out, "--max-queue-mb", value)
    assert result.exit_code == 2
    assert "--max-queue-mb" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()
