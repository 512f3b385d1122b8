"""Where the hooks' copies land (``capture/landing.py``): buffers from a pool keyed by shape and dtype, given
back by the writer and reused, so that a steady run allocates none per batch; a copy kept in --save-dtype
where that is no wider than what the model made; from CUDA, pinned buffers on a side stream (the CUDA tests
skip without a GPU). Values are checked against hand-written hooks."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from helpers import hooked, photo_batch
from slow_runs import kill_when, mixed_photos, start_run

from hookdump.capture.landing import Landing, Pool, kept_dtype

ROW_BYTES = 4 * (64 * 56 * 56 + 128 * 28 * 28)  # resnet18 at 224: layer1 (64, 56, 56), layer2 (128, 28, 28)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize(
    ("made", "save", "kept"),
    [
        (torch.float32, "float16", torch.float16),  # narrower: converted in the copy
        (torch.float32, "bfloat16", torch.bfloat16),
        (torch.bfloat16, "float32", torch.bfloat16),  # wider: the writer widens it, the queue holds bf16
        (torch.float16, "bfloat16", torch.bfloat16),  # as wide: converted in the copy
        (torch.float32, "keep", torch.float32),
        (torch.int64, "float16", torch.int64),  # not a float: never converted
    ],
)
def test_a_copy_is_kept_in_the_save_dtype_where_that_is_no_wider(
    made: torch.dtype, save: str, kept: torch.dtype
) -> None:
    assert kept_dtype(made, save) == kept


def test_the_pool_reuses_what_was_given_back_and_nothing_else() -> None:
    pool = Pool(pinned=False)
    once = pool.take((2, 3), torch.float32, lend=False)  # a copy no later batch makes: never comes back
    pool.give(once)
    assert pool.free_bytes == 0 and pool.made == 1
    pool = Pool(pinned=False)
    first, second = pool.take((2, 3), torch.float32), pool.take((2, 3), torch.float32)
    assert first is not second and pool.made == 2
    pool.give(first)
    pool.give(torch.zeros(2, 3))  # not lent by the pool (a tensor the model may still hold): left alone
    assert pool.take((2, 3), torch.float32) is first
    assert pool.take((2, 3), torch.float32) is not first and pool.made == 3 and pool.reused == 1
    assert pool.take((2, 3), torch.float16).dtype == torch.float16 and pool.made == 4


def test_the_pool_keeps_few_free_buffers_and_only_of_shapes_still_asked_for() -> None:
    pool = Pool(pinned=False, keep=2)
    lent = [pool.take((4,), torch.float32) for _ in range(3)] + [pool.take((5,), torch.float32)]
    for buffer in lent:
        pool.give(buffer)
    assert pool.free_bytes == 2 * 16 + 20  # a third free (4,) buffer is let go
    pool.trim()  # both shapes were asked for in this pass: kept
    assert pool.free_bytes == 2 * 16 + 20
    pool.take((4,), torch.float32)
    pool.trim()  # the next pass asked for (4,) only
    assert pool.free_bytes == 16


def test_the_pool_holds_no_more_free_bytes_than_its_bound() -> None:
    pool = Pool(pinned=False, keep=2)
    pool.max_free = 40  # the writer's queue bound, on the CPU
    lent = [pool.take((4,), torch.float32), pool.take((5,), torch.float32), pool.take((4,), torch.float32)]
    for buffer in lent:
        pool.give(buffer)
    assert pool.free_bytes == 16 + 20  # the second (4,) buffer would make 52 bytes: let go
    pool.max_free = 0  # a bound of no bytes: nothing free is kept
    pool.take((4,), torch.float32)
    pool.give(pool.take((6,), torch.float32))
    assert pool.free_bytes == 20


def test_a_cpu_landing_bounds_its_free_buffers_by_the_queue_bound_unless_it_is_zero() -> None:
    landing = Landing(torch.device("cpu"))
    landing.bound(0)  # --max-queue-mb 0: a whole batch is on disk before the next runs, its buffers kept
    assert landing.pool.max_free is None
    landing.bound(90 << 20)
    assert landing.pool.max_free == 90 << 20


def test_a_cpu_landing_copies_now_into_a_contiguous_buffer_of_the_dtype() -> None:
    landing = Landing(torch.device("cpu"))
    source = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    copy = landing.copy(source, torch.float16)
    landing.fence()()  # nothing to wait for
    source.zero_()  # a later in-place op does not reach the copy
    assert copy.is_contiguous() and copy.dtype == torch.float16
    assert not torch.equal(copy, source.half())
    assert landing.pool.made == 1


def test_a_steady_run_allocates_no_buffer_per_batch(cli, tmp_path: Path) -> None:
    """resnet18's bn1 is changed in place by act1 (ReLU(inplace=True)): it is copied in every batch, into
    the buffer the writer gave back; layer1 is kept by reference after the first batch, and no free buffer
    of its shape is held meanwhile."""
    photos = mixed_photos(tmp_path / "photos", 5)
    out = tmp_path / "out"
    args = ["capture", photos, "-m", "resnet18", "-l", "bn1", "-l", "layer1", "--batch-size", "1"]
    result = cli(*args, "-o", out, "-q", "--max-queue-mb", "0")
    assert result.exit_code == 0, result.stderr
    for row, photo in enumerate(sorted(photos.iterdir())):
        for layer, expected in hooked("resnet18", ["bn1", "layer1"], photo).items():
            np.testing.assert_allclose(np.load(out / f"{layer}.npy")[row], expected[0], rtol=1e-5, atol=1e-5)
    queue = json.loads((out / "manifest.json").read_text())["writer_queue"]
    # batch 1: bn1 and layer1 copied, first seen, into buffers that do not come back (they are kept by
    # reference later, as far as batch 1 knows); batch 2: bn1, found changed in place, into a pool buffer;
    # batches 3-5: bn1 into the buffer the batch before gave back
    assert (queue["buffers_made"], queue["buffers_reused"]) == (3, 3)


def test_a_narrower_save_dtype_is_applied_in_the_hook(cli, tmp_path: Path) -> None:
    photos = mixed_photos(tmp_path / "photos", 4)
    out = tmp_path / "out"
    args = ["capture", photos, "-m", "resnet18", "-l", "layer1", "-l", "layer2", "--batch-size", "2"]
    result = cli(*args, "-o", out, "-q", "--max-queue-mb", "0", "--save-dtype", "float16")
    assert result.exit_code == 0, result.stderr
    data = json.loads((out / "manifest.json").read_text())
    assert data["writer_queue"]["peak_bytes"] == 2 * ROW_BYTES // 2  # a batch of two, held as float16
    assert {(t["dtype"], t["source_dtype"]) for t in data["tensors"]} == {("float16", "float32")}
    for row, photo in enumerate(sorted(photos.iterdir())):
        for layer, expected in hooked("resnet18", ["layer1", "layer2"], photo).items():
            saved = np.load(out / f"{layer}.npy")[row]
            assert saved.dtype == np.float16
            np.testing.assert_allclose(saved, expected[0].astype(np.float16), rtol=2e-3, atol=2e-3)


def test_bf16_waits_in_the_queue_as_bf16_and_is_widened_by_the_writer(cli, tmp_path: Path) -> None:
    photos = mixed_photos(tmp_path / "photos", 2)
    out = tmp_path / "out"
    args = ["capture", photos, "-m", "resnet18", "-l", "layer1", "--batch-size", "2", "--dtype", "bfloat16"]
    result = cli(*args, "-o", out, "-q", "--max-queue-mb", "0")
    assert result.exit_code == 0, result.stderr
    data = json.loads((out / "manifest.json").read_text())
    assert data["writer_queue"]["peak_bytes"] == 2 * 2 * 64 * 56 * 56  # two rows of bf16
    assert [(t["dtype"], t["source_dtype"]) for t in data["tensors"]] == [("float32", "bfloat16")]
    torch.manual_seed(0)
    model = timm.create_model("resnet18").eval()
    seen: list[torch.Tensor] = []
    handle = model.layer1.register_forward_hook(lambda m, a, out: seen.append(out.detach().clone()))
    try:
        x = torch.cat([photo_batch(model, p) for p in sorted(photos.iterdir())])
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            model(x)
    finally:
        handle.remove()
    assert seen[0].dtype == torch.bfloat16
    np.testing.assert_array_equal(np.load(out / "layer1.npy"), seen[0].float().numpy())


def test_copies_handed_to_the_writer_at_hook_time_are_what_the_hook_saw(cli, tmp_path: Path) -> None:
    """bn1's copy (3.2 MB an image) outweighs --max-queue-mb 0.5: from the first batch on, each copy goes to
    the writer from its hook, so the writer never holds more than one. bn1 is changed in place by act1
    after its hook."""
    photos = mixed_photos(tmp_path / "photos", 4)
    out = tmp_path / "out"
    args = ["capture", photos, "-m", "resnet18", "-l", "bn1", "-l", "layer1", "--batch-size", "1"]
    result = cli(*args, "-o", out, "-q", "--max-queue-mb", "0.5")
    assert result.exit_code == 0, result.stderr
    queue = json.loads((out / "manifest.json").read_text())["writer_queue"]
    assert queue["handed_at_hook"] is True
    assert queue["peak_bytes"] == 4 * 64 * 112 * 112  # bn1 of one image: not the first batch whole
    for row, photo in enumerate(sorted(photos.iterdir())):
        for layer, expected in hooked("resnet18", ["bn1", "layer1"], photo).items():
            np.testing.assert_allclose(np.load(out / f"{layer}.npy")[row], expected[0], rtol=1e-5, atol=1e-5)


def test_a_run_killed_while_handing_copies_at_hook_time_resumes_to_the_same_bytes(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKDUMP_TEST_SLEEP", "0")  # in this process nothing is stopped; start_run's sleep
    photos = mixed_photos(tmp_path / "photos", 12)
    args = [str(photos), "-m", "resnet18", "-l", "bn1", "-l", "layer1", "--batch-size", "3"]
    whole, out = tmp_path / "whole", tmp_path / "out"
    assert cli("capture", *args, "-o", whole, "-q").exit_code == 0  # the default bound: whole batches
    bounded = [*args, "--max-queue-mb", "0.5"]
    run = start_run(["capture", *bounded, "-o", str(out)])
    kill_when(run, out, 6)
    assert run.returncode == -signal.SIGKILL
    done = cli("capture", *bounded, "-o", out, "--resume")
    assert done.exit_code == 0, done.stderr
    assert json.loads((out / "manifest.json").read_text())["writer_queue"]["handed_at_hook"] is True
    assert json.loads((whole / "manifest.json").read_text())["writer_queue"]["handed_at_hook"] is False
    for name in ("bn1.npy", "layer1.npy"):
        assert (whole / name).read_bytes() == (out / name).read_bytes(), name


@CUDA
def test_a_cuda_capture_lands_in_pinned_reused_buffers_with_the_cpu_values(cli, tmp_path: Path) -> None:
    photos = mixed_photos(tmp_path / "photos", 6)
    outs = {device: tmp_path / device for device in ("cpu", "cuda")}
    for device, out in outs.items():
        args = ["capture", photos, "-m", "resnet18", "-l", "bn1", "-l", "layer1", "--batch-size", "2"]
        result = cli(*args, "-o", out, "-q", "--device", device)
        assert result.exit_code == 0, result.stderr
    data = json.loads((outs["cuda"] / "manifest.json").read_text())
    assert data["cuda_max_memory_allocated"] > 0 and data["writer_queue"]["buffers_reused"] > 0
    for layer in ("bn1", "layer1"):
        cpu, cuda = (np.load(out / f"{layer}.npy") for out in outs.values())
        np.testing.assert_allclose(cuda, cpu, rtol=1e-2, atol=1e-2)  # TF32 convolutions on the GPU


@CUDA
def test_a_cuda_landing_is_pinned_and_waits_for_its_event() -> None:
    landing = Landing(torch.device("cuda"))
    source = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16)
    expected = source.cpu()
    copy = landing.copy(source, torch.bfloat16)
    source.zero_()  # after the copy was queued, in the model's stream: cannot reach it
    landing.fence()()
    assert copy.is_pinned() and copy.dtype == torch.bfloat16
    assert torch.equal(copy, expected)
