"""``--compile``: the hooked model's forward pass under ``torch.compile`` (inductor), compiled in its first
batch with the recorder's hooks traced into the graph (``copies.compiling``). A batch of another size
(the last one, or one that --skip-bad shortened) runs eagerly instead: a new batch size would compile again,
which costs more than the batch. What dynamo made (graphs, graph breaks) and how far the compiled values are
from eager ones go into notes and the manifest."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..errors import HookdumpError, UsageError
from ..failures import from_environment
from ..store.folder.captured import Key
from .recorder import Recorder

#: Loggers that warn on every compile about things that do not matter here (a CPU machine without CUDA).
_CHATTY = ("torch.utils.cpp_extension", "torch._inductor")


class Compiled:
    """Runs each batch through a ``Recorder`` with the model compiled for the first batch's size (eager for
    any other size). The first batch runs eagerly too, before its compiled pass: that pass tells which
    tensors the model changes in place after their hooks (version counters, which a graph does not have),
    and the two are compared, so the manifest says how far compiled values are from eager ones."""

    def __init__(self, model: nn.Module, label: str) -> None:
        self.model = model
        self.label = label
        self._compiled = torch.compile(model)
        self._before = _counts()
        self.batch_size: int | None = None  # the compiled graph's batch size, once the first batch ran
        self.first_seconds = 0.0  # the first compiled call: compilation and the forward
        self.seconds: list[float] = []  # each later compiled batch
        self.eager_images: list[int] = []  # the batches of another size, run eagerly
        # the first batch: the worst max |compiled - eager| / max |eager| of a tensor, and which tensor
        self.difference, self.difference_tensor = 0.0, ""

    def run(self, recorder: Recorder, batch: torch.Tensor) -> None:
        """``recorder.run`` of one batch, compiled where it can be; the copies are left in the recorder."""
        if self.batch_size is None:
            recorder.run(batch, self.label)
            eager = recorder.drain()
            recorder.run(batch, self.label, forward=self._first)
            self.difference, self.difference_tensor = _worst(recorder.batch, eager)
            self.batch_size = int(batch.shape[0])
        elif batch.shape[0] != self.batch_size:
            self.eager_images.append(int(batch.shape[0]))
            recorder.run(batch, self.label)
        else:
            start = time.perf_counter()
            recorder.run(batch, self.label, forward=self._compiled)
            self.seconds.append(time.perf_counter() - start)

    def _first(self, batch: torch.Tensor) -> Any:
        start = time.perf_counter()
        try:
            with _quiet():
                output = self._compiled(batch)
        except (HookdumpError, KeyboardInterrupt):
            raise
        except Exception as exc:
            known = from_environment(exc)
            if known is not None:
                raise known from exc
            lines = [line for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
            fix = "Drop --compile to capture it eagerly. (HOOKDUMP_DEBUG=1 shows the traceback.)"
            if "CxxCompiler" in lines[0] or "C++ compiler" in lines[0]:
                fix = (
                    "On a CPU, torch.compile builds its kernels with a C++ compiler: install one (g++; or set"
                    " CXX to one that works), or drop --compile to capture eagerly."
                )
            raise UsageError(
                f"torch.compile could not compile {self.label} for --compile: {type(exc).__name__}:"
                f" {lines[0][:300]}",
                fix,
            ) from exc
        self.first_seconds = time.perf_counter() - start
        return output

    def record(self) -> dict[str, Any]:
        """The manifest's ``compile`` entry."""
        now = _counts()
        reasons = sorted(set(now[2]) - set(self._before[2]))
        return {
            "backend": "inductor",
            "graphs": now[0] - self._before[0],
            "graph_breaks": now[1] - self._before[1],
            "graph_break_reasons": reasons[:10],
            "batch_size": self.batch_size,
            "first_batch_seconds": round(self.first_seconds, 3),
            "batch_seconds": round(statistics.median(self.seconds), 3) if self.seconds else None,
            "eager_batches": len(self.eager_images),
            "first_batch_difference": self.difference,
            "first_batch_difference_tensor": self.difference_tensor or None,
        }

    def notes(self) -> list[str]:
        """What the user should know: compile time, graphs and breaks, how far from eager, eager batches."""
        made = self.record()
        then = f", then {made['batch_seconds']:.2f} s a batch" if made["batch_seconds"] is not None else ""
        breaks = made["graph_breaks"]
        why = (
            f" (first: {made['graph_break_reasons'][0][:200]})"
            if breaks and made["graph_break_reasons"]
            else ""
        )
        compared = (
            f"differ from eager ones by at most {self.difference:.1e} of a tensor's largest value"
            f" ({self.difference_tensor})"
            if self.difference
            else "equal eager ones bit for bit (other inputs may still round otherwise)"
        )
        notes = [
            f"--compile: torch.compile (inductor) took {made['first_batch_seconds']:.1f} s for the first"
            f" batch, its compilation included{then}; {made['graphs']} graph(s),"
            f" {breaks} graph break(s){why}",
            f"--compile: the first batch ran eagerly too; its compiled values {compared}",
        ]
        if self.eager_images:
            sizes = ", ".join(str(n) for n in sorted(set(self.eager_images)))
            notes.append(
                f"--compile: {len(self.eager_images)} batch(es) of another size ({sizes} images) ran eagerly:"
                " a new batch size would have compiled again"
            )
        return notes


def _worst(compiled: dict[Key, torch.Tensor], eager: dict[Key, torch.Tensor]) -> tuple[float, str]:
    """The largest ``max |compiled - eager| / max |eager|`` over the tensors, and which (layer, kind)."""
    worst, where = 0.0, ""
    for key, value in eager.items():
        other = compiled.get(key)
        if other is None or not value.is_floating_point() or value.numel() == 0:
            continue
        scale = float(value.abs().max()) or 1.0
        gap = float((other.float() - value.float()).abs().max()) / scale
        if gap > worst or not where:
            worst, where = gap, key[0] if key[1] == "output" else f"{key[0]} ({key[1]})"
    return worst, where


def _counts() -> tuple[int, int, dict[str, int]]:
    """Dynamo's counters so far: graphs compiled, graph breaks, and the breaks' reasons."""
    from torch._dynamo.utils import counters

    breaks = dict(counters["graph_break"])
    return int(counters["stats"]["unique_graphs"]), sum(breaks.values()), breaks


@contextmanager
def _quiet() -> Iterator[None]:
    """Compiling without inductor's warnings on stderr (hookdump's notes say what matters)."""
    loggers = [logging.getLogger(name) for name in _CHATTY]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
