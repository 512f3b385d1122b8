"""Each module's own ops, found in one traced pass that ``OpWatch`` (``ops.py``) watches (``discover``): their
names, output shapes, calls and the modules their forwards call (``OpInfo``, as ``list-modules --ops`` lists
them), and which axis of each grows with the batch (``mark_batch_axes``, from a second pass at batch 2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from .ops import Frame, OpWatch, base_of
from .outputs import tensor_shapes


@dataclass
class OpInfo:
    """One op of a module's own forward, as ``list-modules --ops`` lists it."""

    name: str  # PATH:OP, as -l takes it
    op: str  # OP: the torch function's name and its occurrence
    module: str  # PATH ("" for the root)
    shapes: list[list[int]]  # of its result, in the traced call
    calls: int = 1  # calls of the module in which it ran
    inplace: bool = False  # x += y: the value the op left in x
    callees: tuple[str, ...] = ()  # the modules its module's forward calls (directly or not): their frames
    per_call: tuple[int, ...] = ()  # how many ops of its function each call of its module ran
    batch_axis: int | None = 0  # the axis that grows with the batch (``mark_batch_axes``); None: none does;
    # -1: the second pass did not run it (a cache the first filled)

    @property
    def func(self) -> str:
        """The torch function's name: ``add`` of ``add_1``."""
        return base_of(self.op)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "op": self.op, "module": self.module, "shapes": self.shapes,
            "calls": self.calls, "inplace": self.inplace,
        }  # fmt: skip


def discover(model: nn.Module, run: Callable[[], Any]) -> dict[str, list[OpInfo]]:
    """Each module's own ops (``""``: the root's), found in the pass ``run()`` makes of ``model``, in the
    order they ran; an op's shapes are those of its first call."""
    found: dict[str, dict[str, OpInfo]] = {}
    calls: dict[str, dict[str, set[int]]] = {}
    runs: dict[str, dict[int, dict[str, int]]] = {}  # path -> call -> ops of each function in it

    def done(frame: Frame) -> None:
        runs.setdefault(frame.path, {})[frame.call] = dict(frame.counts)

    def seen(frame: Frame, label: str, result: Any, inplace: bool) -> None:
        ops = found.setdefault(frame.path, {})
        if label not in ops:
            ops[label] = OpInfo(
                f"{frame.path}:{label}", label, frame.path, tensor_shapes(result), inplace=inplace
            )
        calls.setdefault(frame.path, {}).setdefault(label, set()).add(frame.call)

    watch = OpWatch(seen, done=done)
    callees = watch.callees
    with watch.watching(model), watch:
        run()
    for path, ops in found.items():
        inside = tuple(sorted(called(path, callees)))
        for label, info in ops.items():
            info.calls = len(calls[path][label])
            info.callees = inside
            info.per_call = tuple(
                counts.get(info.func, 0) for _, counts in sorted(runs.get(path, {}).items())
            )
    return {path: list(ops.values()) for path, ops in found.items()}


def mark_batch_axes(ops: dict[str, list[OpInfo]], again: dict[str, list[OpInfo]]) -> None:
    """Each op's ``batch_axis``, from ``again``, the ops of a pass at batch 2: the first axis that doubled in
    every tensor it returns, None where none did (the same value for every input), -1 for an op that pass
    did not run (a cache filled by the first)."""
    second = {op.name: op.shapes for found in again.values() for op in found}
    for found in ops.values():
        for op in found:
            if op.name not in second or len(second[op.name]) != len(op.shapes):
                op.batch_axis = -1
                continue
            pairs = list(zip(op.shapes, second[op.name], strict=True))
            axes = [
                i for i in range(min(len(a) for a, _ in pairs))
                if all(len(a) == len(b) and b[i] == 2 * a[i] for a, b in pairs)
            ]  # fmt: skip
            op.batch_axis = axes[0] if axes else None


def called(path: str, callees: dict[str, set[str]]) -> set[str]:
    """Every module a call of ``path`` called, directly or through another (``OpWatch.callees``)."""
    found: set[str] = set()
    todo = list(callees.get(path, ()))
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += callees.get(name, ())
    return found
