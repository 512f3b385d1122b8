"""Image files to batches, decoded and transformed by the model's own eval transform in worker processes
(``--workers``) so that the model does not wait for JPEG decoding; rows stay in input order. And the seeded
random batch of ``--random-input``."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ..errors import InputError
from . import sizes
from .fetch import shown
from .images import labels, read
from .transforms import eval_transform, model_mode


@dataclass
class Batch:
    """One forward pass's input: the images' rows, their paths, and what --skip-bad left out of it;
    ``records``: each image's record as the decoding worker read it (``images.read``, with its labels)."""

    paths: list[Path]
    tensor: torch.Tensor | None
    failed: list[dict[str, str]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


def default_workers(images: int, batch_size: int) -> int:
    """Decode in parallel when there is more than one batch: one worker per spare core, at most 8."""
    if images <= batch_size:
        return 0
    return max(1, min(8, (os.cpu_count() or 1) - 1))


_Item = tuple[int, torch.Tensor | None, dict[str, Any], str, str]  # index, pixels, record, failure, its fix


class _Images(Dataset[_Item]):
    """Decodes one image and records it (its sha256 and header from the bytes read for it, its labels); a
    failure is returned as data (path, reason), never raised inside a worker."""

    def __init__(self, paths: list[Path], config: dict[str, Any]) -> None:
        self.paths = paths
        self.config = config
        self.transform: Callable[[Any], torch.Tensor] | None = None  # made in the worker that uses it

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> _Item:
        if self.transform is None:
            self.transform = eval_transform(self.config)
        path = self.paths[i]
        try:
            image, record = read(path, model_mode(self.config), self.config.get("image_key"))
            record |= labels(path, self.config.get("label_column"))
            return i, self.transform(image), record, "", ""
        except InputError as exc:
            return i, None, {}, exc.message, exc.hint or ""


_Collated = tuple[
    list[int],
    torch.Tensor | None,
    list[dict[str, Any]],
    list[tuple[int, str, str]],
    list[tuple[int, tuple[int, ...]]],
]


def _collate(items: list[_Item], size: tuple[int, ...] | None) -> _Collated:
    """Stack the decoded images (in the worker), with their records; keep the failures as (index, reason,
    hint). When one has another size than ``size`` (a caller's transform that fixes none), nothing is
    stacked: each image's (index, size) comes back instead (None: one image a batch, any size)."""
    good = [(i, t, r) for i, t, r, _, _ in items if t is not None]
    odd = size is not None and any(tuple(t.shape) != size for _, t, _ in good)
    stacked = torch.stack([t for _, t, _ in good]) if good and not odd else None
    shapes = [(i, tuple(t.shape)) for i, t, _ in good] if odd else []
    failed = [(i, m, h) for i, t, _, m, h in items if t is None]
    return [i for i, _, _ in good], stacked, [r for _, _, r in good], failed, shapes


def batches(
    paths: list[Path],
    config: dict[str, Any],
    batch_size: int,
    workers: int = 0,
    skip_bad: bool = False,
    pin_memory: bool = False,
) -> Iterator[Batch]:
    """Load, transform and stack images ``batch_size`` at a time, in order; ``workers`` decode ahead
    (pinned memory for a fast copy to the GPU).

    An image that cannot be decoded stops the run (an InputError naming it) unless ``skip_bad``: then it is
    left out of its batch and reported in ``Batch.failed``. Images of other sizes than ``config``'s (a
    caller's transform that fixes none) stop it when stacked; one a batch, they go through.
    """
    size = tuple(config["input_size"])
    loader = DataLoader(
        _Images(paths, config),
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        collate_fn=functools.partial(_collate, size=size if batch_size > 1 else None),
        pin_memory=pin_memory,
        worker_init_fn=_in_each_worker if workers else None,
    )
    iterator = iter(loader)
    try:
        for kept, stacked, records, failures, odd in iterator:
            if odd:
                raise sizes.unstackable(paths, size, odd, batch_size)
            if failures and not skip_bad:
                _, message, hint = failures[0]
                raise InputError(message, hint or None)
            failed = [{"path": shown(paths[i]), "reason": message} for i, message, _ in failures]
            yield Batch([paths[i] for i in kept], stacked, failed, records)
    finally:
        _stop_workers(iterator)


def random_batch(config: dict[str, Any], seed: int) -> torch.Tensor:
    """One seeded standard-normal input of the model's input size."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((1, *config["input_size"]), generator=generator)


def _in_each_worker(worker_id: int) -> None:
    """In each decoding worker: Ctrl-C and SIGTERM sent to the whole process group (a terminal, Slurm,
    systemd, torchrun) are the main process's to handle. A worker they killed would fail the run as
    "DataLoader worker killed by signal" before the main process could keep its progress; it stops the
    workers itself. If the main process dies (SIGKILL, the OOM killer), the worker exits too: torch's own
    watch of the parent never runs while the worker waits to hand over a batch that nobody will read."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(os.getppid(),), name="hookdump-parent", daemon=True).start()


def _exit_with(parent: int) -> None:
    """Exit this process as soon as ``parent`` is no longer its parent (it died)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _stop_workers(iterator: Iterator[Any]) -> None:
    """Let the workers exit on their own now (they clean up after themselves, e.g. their /tmp/pymp-*
    folders), rather than be killed by multiprocessing at interpreter exit after Ctrl-C or SIGTERM."""
    shutdown = getattr(iterator, "_shutdown_workers", None)  # DataLoader's own; absent with workers=0
    if shutdown is not None:
        shutdown()


def planned_sizes(paths: list[Path], config: dict[str, Any], batch_size: int, skip_bad: bool) -> list[str]:
    """``--dry-run`` with a caller's transform: every input decoded and transformed into batches as the run
    makes them, refused where the run would refuse them; a note when they have several sizes."""
    seen = sizes.Seen()
    for batch in batches(paths, config, batch_size, 0, skip_bad):
        if batch.tensor is not None:
            seen.add(tuple(batch.tensor.shape[1:]), batch.paths)
    return list(filter(None, [seen.note(planned=True)]))
