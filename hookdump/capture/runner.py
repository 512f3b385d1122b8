"""Batches through the model in eval mode: precision (autocast), memory format, grad mode."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ..errors import UsageError
from ..failures import from_environment
from ..inputs.loader import Batch
from ..store.folder.captured import Key
from .compiled import Compiled
from .recorder import Recorder

DTYPES = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Run:
    """How to run the forward passes of one capture."""

    device: torch.device
    dtype: str = "float32"
    channels_last: bool = False
    grad: bool = False
    target: int | None = None


def forward_all(
    net: torch.nn.Module,
    recorder: Recorder,
    batches: Iterable[Batch],
    run: Run,
    label: str,
    sink: Callable[[dict[Key, torch.Tensor], Batch, list[int]], None],
    compiled: Compiled | None = None,
) -> None:
    """Every batch through the model in eval mode; mode and requires_grad restored whatever happens.

    Without grad the pass runs under ``no_grad`` (not ``inference_mode``: its tensors keep the version
    counter that tells when a captured tensor is changed in place later). With grad the parameters are
    frozen and the input requires grad, so only the activations' gradients are computed.

    Each batch's copies go to ``sink`` as soon as its pass is done, with the batch and the class whose
    score was differentiated per image (empty without grad). A batch that --skip-bad emptied still goes to
    ``sink`` (it moves the run on), without a forward pass. ``compiled`` (--compile) runs the batches.
    """
    was_training = net.training
    params = [(p, p.requires_grad) for p in net.parameters()]
    autocast = DTYPES[run.dtype]
    precision = torch.autocast(run.device.type, autocast) if autocast else contextlib.nullcontext()
    try:
        net.eval()
        if run.channels_last:
            net.to(memory_format=torch.channels_last)
        for p, _ in params:
            p.requires_grad_(False)
        with recorder, precision, torch.set_grad_enabled(run.grad):
            for batch in batches:
                if batch.tensor is None:
                    sink({}, batch, [])
                    continue
                x = batch.tensor.to(run.device, non_blocking=True)
                if run.channels_last and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                try:
                    x = x.requires_grad_(run.grad)
                    if compiled is None:
                        classes = recorder.run(x, label, run.target)
                    else:  # never with --grad: no classes
                        compiled.run(recorder, x)
                        classes = []
                except RuntimeError as exc:  # e.g. `.view()` of a conv's output, which channels_last breaks
                    if not run.channels_last or from_environment(exc) is not None:
                        raise
                    raise UsageError(
                        f"The forward pass of {label} failed with --channels-last: {type(exc).__name__}:"
                        f" {(str(exc).strip().splitlines() or [''])[0]}",
                        "Some model code needs channels-first tensors: drop --channels-last. (If the error"
                        " stays, it is the model's own; HOOKDUMP_DEBUG=1 shows the traceback.)",
                    ) from exc
                sink(recorder.drain(), batch, classes)
    finally:
        net.train(was_training)
        for p, requires_grad in params:
            p.requires_grad_(requires_grad)
