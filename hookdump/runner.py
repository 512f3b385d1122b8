"""Batches through the model in eval mode: precision (autocast), memory format, grad mode."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from .recorder import Recorder
from .records import Key

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
    batches: Iterable[torch.Tensor],
    run: Run,
    label: str,
    sink: Callable[[dict[Key, torch.Tensor]], None],
) -> list[int]:
    """Every batch through the model in eval mode; mode and requires_grad restored whatever happens.

    Without grad the pass runs under ``no_grad`` (not ``inference_mode``: its tensors keep the version
    counter that tells when a captured tensor is changed in place later). With grad the parameters are
    frozen and the input requires grad, so only the activations' gradients are computed.

    Each batch's copies go to ``sink`` as soon as its pass is done.
    Returns the class whose score was differentiated, per image (empty without grad).
    """
    was_training = net.training
    params = [(p, p.requires_grad) for p in net.parameters()]
    autocast = DTYPES[run.dtype]
    precision = torch.autocast(run.device.type, autocast) if autocast else contextlib.nullcontext()
    classes: list[int] = []
    try:
        net.eval()
        if run.channels_last:
            net.to(memory_format=torch.channels_last)
        for p, _ in params:
            p.requires_grad_(False)
        with recorder, precision, torch.set_grad_enabled(run.grad):
            for batch in batches:
                batch = batch.to(run.device)
                if run.channels_last and batch.dim() == 4:
                    batch = batch.contiguous(memory_format=torch.channels_last)
                classes += recorder.run(batch.requires_grad_(run.grad), label, run.target)
                sink(recorder.drain())
    finally:
        net.train(was_training)
        for p, requires_grad in params:
            p.requires_grad_(requires_grad)
    return classes
