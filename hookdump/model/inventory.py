"""One traced forward pass that says, for every module: class, parameters, calls, output shapes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import InputError, UsageError
from . import featlevels
from .meta import FastShapes
from .opinfo import discover, mark_batch_axes
from .outputs import tensor_shapes
from .tree import ATTN_DROP, Inventory, ModuleInfo, is_container


def describe(model: nn.Module, input_size: tuple[int, ...]) -> Inventory:
    """The static part: names, classes, own parameter counts, containers (no forward run).

    A module registered twice (CoaT shares ``crpe1`` with its blocks) has one path, its first, and is
    listed as a child only there, as ``named_modules()`` does.
    """
    named = dict(model.named_modules())
    modules = [
        ModuleInfo(
            name=name,
            type=type(module).__name__,
            params=sum(p.numel() for p in module.parameters(recurse=False)),
            container=is_container(module),
            children=[
                f"{name}.{child}" for child, _ in module.named_children() if f"{name}.{child}" in named
            ],
            scripted=isinstance(module, torch.jit.ScriptModule),
        )
        for name, module in named.items()
        if name
    ]
    fused = {
        f"{name}.{child}"
        for name, module in model.named_modules()
        if getattr(module, "fused_attn", 0) is True
        for child, part in module.named_children()
        if child == ATTN_DROP or isinstance(part, nn.Softmax)  # DaViT's WindowAttention: a softmax child
    }
    for info in modules:
        info.fused_attention = info.name in fused
    found = Inventory(type(model).__name__, modules, tuple(input_size), None)
    found.feature_info = featlevels.read(model)
    featlevels.mark(found)
    return found


def trace(
    model: nn.Module, input_size: tuple[int, ...], device: torch.device | str, ops: bool = False
) -> Inventory:
    """Run one batch-of-one forward with a hook on every module and count calls and shapes; ``ops``: also
    name each module's own ops (``model/ops.py``) in the same pass."""
    inventory = describe(model, input_size)
    calls = {m.name: 0 for m in inventory.modules}
    finished: dict[str, int] = {}
    returns = [0]
    shapes: dict[str, list[list[int]]] = {}
    in_shapes: dict[str, list[list[int]]] = {}

    def make_hook(name: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            calls[name] += 1
            returns[0] += 1
            finished[name] = returns[0]
            if name not in shapes:
                shapes[name] = tensor_shapes(output)
                in_shapes[name] = tensor_shapes(args)

        return hook

    handles = [
        module.register_forward_hook(make_hook(name))
        for name, module in model.named_modules()
        if name and not isinstance(module, torch.jit.ScriptModule)  # (TorchScript takes no hook)
    ]
    was_training = model.training
    fast = FastShapes() if torch.device(device).type == "meta" else contextlib.nullcontext()
    try:
        model.eval()
        with torch.no_grad(), fast:
            x = torch.zeros((1, *input_size), device=device)
            if ops:
                kept: list[Any] = []
                inventory.ops = discover(model, lambda: kept.append(model(x)))
                returned = kept[0]
            else:
                returned = model(x)
            for handle in handles:
                handle.remove()
            if inventory.ops is not None:  # a second pass, unhooked: which axis of each op is the batch
                twice = torch.zeros((2, *input_size), device=device)
                mark_batch_axes(inventory.ops, discover(model, lambda: model(twice)))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    for info in inventory.modules:
        info.calls = calls[info.name]
        info.output_shapes = shapes.get(info.name, [])
        info.input_shapes = in_shapes.get(info.name, [])
        info.finished = finished.get(info.name)
    inventory.traced_on = torch.device(device).type
    inventory.returns = tensor_shapes(returned)
    inventory.returns_plain = isinstance(returned, torch.Tensor)
    featlevels.mark(inventory)  # again, now that output shapes tell each level's layout
    return inventory


def take(
    build_meta: Callable[[], nn.Module],
    build_real: Callable[[], nn.Module],
    input_size: tuple[int, ...],
    shapes: bool = True,
    size_given: bool = False,
    ops: bool = False,
) -> Inventory:
    """Trace on the meta device (no weights); fall back to a real CPU pass, and say so.

    A model that runs on neither is an error: bad usage when the input size came from ``--input-size``.
    """
    try:
        meta_model = build_meta()
    except Exception:
        meta_model = None
    if not shapes:
        return describe(meta_model if meta_model is not None else build_real(), input_size)
    if meta_model is not None:
        try:
            return trace(meta_model, input_size, "meta", ops)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {_first_line(exc)}"
    else:
        reason = "the model cannot be built on the meta device"
    real = build_real()
    device = next((p.device for p in real.parameters()), torch.device("cpu"))
    try:
        inventory = trace(real, input_size, device, ops)
    except Exception as exc:
        size = "x".join(map(str, input_size))
        kind = UsageError if size_given else InputError
        raise kind(
            f"The model does not run on a {size} input: {type(exc).__name__}: {_first_line(exc)}",
            "Drop --input-size to use the model's own input size, or pass one it accepts."
            if size_given
            else "The model fails at its own default input size; check the model (or its plugin).",
        ) from exc
    inventory.notes.append(f"traced with a real {device.type} pass ({reason[:160]})")
    return inventory


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
