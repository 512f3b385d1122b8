"""What a capture run sets up from its plan: the recorder its hooks are, the batches still to run (decoded
by workers, timed), how far it got (continued by ``--resume``), and the manifest keys of how it ran."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch

from ..inputs import loader
from ..inputs.loader import random_batch
from ..model.device import resolve_device
from ..store.folder import profile
from . import shapes
from .landing import Landing
from .options import CaptureOptions
from .recorder import Recorder
from .reduce import token_layout
from .results import CapturePlan
from .runner import Run


class RunState:
    """How far the run got: batches, images, classes, skipped inputs; continued from ``progress``."""

    def __init__(self, progress: dict[str, Any] | None, skipped: list[dict[str, str]]) -> None:
        progress = progress or {}
        self.batches: int = progress.get("batches", 0)
        self.images: int = progress.get("images", 0)
        self.classes: list[int] = progress.get("classes", [])
        self.skipped: list[dict[str, str]] = progress.get("skipped", skipped)

    @property
    def skipped_paths(self) -> set[str]:
        return {s["path"] for s in self.skipped}

    def advance(self, batch: loader.Batch, classes: list[int]) -> None:
        self.batches += 1
        self.images += len(batch.paths) + len(batch.failed)
        self.classes += classes
        self.skipped += batch.failed

    def progress(self, total: int, recorder: Recorder) -> dict[str, Any]:
        """The small part of a checkpoint (``sinks.Writer.start`` wrote the options and inputs once)."""
        return {
            "batches": self.batches, "images": self.images, "total": total or 1,
            "skipped": list(self.skipped), "recorder": recorder.state(),
        }  # fmt: skip


def recorder(net: torch.nn.Module, found: CapturePlan, landing: Landing) -> Recorder:
    """The ``Recorder`` of ``net`` as ``found`` plans it: targets, op values, calls, early stop, options;
    its copies land on the host through ``landing``."""
    opts, inventory = found.options, found.tree.inventory
    modules = inventory.modules
    ops = {t.path: op for t in found.targets if (op := inventory.op(t.path)) is not None}  # PATH:OP
    as_layers = [inventory.get(name) for name in ops]  # an op runs in its module's calls
    calls = {m.name: m.calls or 1 for m in [*modules, *filter(None, as_layers)]}
    finished = {m.name: m.finished for m in modules if m.finished is not None}
    early = opts.early_stop and not opts.compile  # a compiled graph runs whole
    return Recorder(
        net, found.targets, opts.what, grad=opts.grad, expected_calls=calls if early else None,
        finished=finished, reduce=opts.reduce, save_as=found.save_as, channels_last=found.channels_last,
        tokens=token_layout(net), op_values=ops, save_dtype=opts.save_dtype, landing=landing,
    )  # fmt: skip


def batches(found: CapturePlan, done: int) -> Generator[loader.Batch, None, None]:
    """The batches still to run (after ``done`` of them, with --resume); close it to stop the workers."""
    opts, source = found.options, found.source
    assert source is not None
    if source.random:
        if not done:
            yield loader.Batch([], random_batch(found.config, source.seed))
        return
    rest = found.paths[done * opts.batch_size :]
    workers = loader.default_workers(len(rest), opts.batch_size) if opts.workers is None else opts.workers
    pin = resolve_device(opts.device).type == "cuda"
    yield from loader.batches(rest, found.config, opts.batch_size, workers, opts.skip_bad, pin)


def timed(
    batches: Generator[loader.Batch, None, None], watch: shapes.Watch
) -> Generator[loader.Batch, None, None]:
    """``batches``, each shown to ``watch``, with the time spent waiting for each added to the profile's
    ``decode``."""
    start = profile.clock()
    for batch in batches:
        profile.add("decode", start)
        watch.batch(batch)
        yield batch
        start = profile.clock()


def run_record(recorder: Recorder, run: Run, opts: CaptureOptions, classes: list[int]) -> dict[str, Any]:
    """The manifest keys that describe how this capture ran."""
    return {
        "save_dtype": opts.save_dtype,
        "channels_last": run.channels_last,
        "reduce": opts.reduce,
        "stopped_early": recorder.stopped_early,
        "grad": {"target": "top" if run.target is None else run.target, "classes": classes}
        if run.grad
        else None,
        "values": [
            {"layer": k[0], "kind": k[1], "index": k[2], "call": k[3], "value": v}
            for k, v in recorder.other.items()
        ],
    }
