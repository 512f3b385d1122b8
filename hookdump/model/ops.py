"""Values a module computes in its own forward, not in a child's: the residual ``x + ...`` of a transformer
block, ``softmax`` inside an attention module, ``F.gelu`` in forward code. Each is named ``PATH:OP``: ``OP``
is the torch function's readable name (``x + y``, ``x.add(y)``, ``torch.add(x, y)`` and ``x += y`` are all
``add``), with ``_1``, ``_2``, ... for its later uses in the same call of the module, in the order the
forward runs them (``blocks.3:add``, ``blocks.3:add_1``); the root module's own are ``:OP``. Ops that return
no tensor (sizes, shapes) get no name.

:class:`OpWatch` is a ``TorchFunctionMode`` that names the ops of whichever module's forward is innermost,
with a frame per module call pushed and popped by hooks on the modules watched (a child's frame records
nothing for its parent). :func:`discover` runs it over one traced pass (the meta device, like the rest of
the inventory) and lists each module's own ops with their output shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from torch import nn
from torch.overrides import TorchFunctionMode

from .outputs import tensor_shapes

#: Operator methods whose reflected (``__radd__``) and in-place (``__iadd__``) forms fold to one name.
_OPERATORS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "div": "div", "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}  # fmt: skip


def op_name(func: Callable[..., Any]) -> tuple[str, bool] | None:
    """``(name, in place)`` of a torch function as ``PATH:OP`` names it: ``Tensor.add``, ``torch.add``,
    ``Tensor.__add__`` and ``Tensor.__radd__`` are ``add``, ``Tensor.add_`` and ``__iadd__`` are ``add`` in
    place, ``x.T`` is ``T``; None for what has no name."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        return None
    if name == "__get__":  # a property: x.T, x.mT, x.real
        name = str(getattr(getattr(func, "__self__", None), "__name__", "get"))
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        base = name[2:-2]
        for prefix, inplace in (("i", True), ("r", False), ("", False)):
            rest = base[len(prefix) :] if base.startswith(prefix) else None
            if rest in _OPERATORS:
                return _OPERATORS[rest], inplace
        return base, False
    if name.endswith("_") and not name.startswith("_"):
        return name[:-1], True
    return name, False


@dataclass
class Frame:
    """One call of one watched module: its path and how often each op ran in it so far."""

    path: str
    counts: dict[str, int] = field(default_factory=dict)

    def label(self, op: str) -> str:
        """``op`` for its first use in this call, ``op_1``, ``op_2``, ... after."""
        n = self.counts.get(op, 0)
        self.counts[op] = n + 1
        return op if n == 0 else f"{op}_{n}"


Seen = Callable[[str, str, Any, bool], None]  # (module path, op label, result, in place)


class OpWatch(TorchFunctionMode):
    """While entered, every torch function that returns a tensor, run by the innermost watched module call,
    is named and handed to ``seen(path, label, result, in place)``; outside any frame, nothing is."""

    def __init__(self, seen: Seen) -> None:
        super().__init__()
        self.seen = seen
        self.frames: list[Frame] = []

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        if self.frames and tensor_shapes(result):
            named = op_name(func)
            if named is not None:
                frame = self.frames[-1]
                self.seen(frame.path, frame.label(named[0]), result, named[1])
        return result

    @contextmanager
    def watching(self, model: nn.Module, paths: set[str] | None = None) -> Iterator[None]:
        """Push a frame when a module's forward starts and pop it when it ends (``paths``: those modules and
        every module under them; None: all), the hooks removed after."""
        handles = []
        for path, module in model.named_modules():
            if paths is None or any(path == p or path.startswith(f"{p}.") or not p for p in paths):
                handles.append(module.register_forward_pre_hook(self._push(path)))
                handles.append(module.register_forward_hook(self._pop, always_call=True))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            self.frames.clear()

    def _push(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            self.frames.append(Frame(path))

        return hook

    def _pop(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.frames:
            self.frames.pop()


@dataclass
class OpInfo:
    """One op of a module's own forward, as ``list-modules --ops`` lists it."""

    name: str  # PATH:OP, as -l takes it
    op: str  # OP: the torch function's name and its occurrence
    module: str  # PATH ("" for the root)
    shapes: list[list[int]]  # of its result, in the traced call
    calls: int = 1  # calls of the module in which it ran
    inplace: bool = False  # x += y: the value the op left in x

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
    frames_seen: dict[str, int] = {}

    def seen(path: str, label: str, result: Any, inplace: bool) -> None:
        ops = found.setdefault(path, {})
        if label not in ops:
            ops[label] = OpInfo(f"{path}:{label}", label, path, tensor_shapes(result), inplace=inplace)
        calls.setdefault(path, {}).setdefault(label, set()).add(frames_seen.get(path, 0))

    watch = OpWatch(seen)
    counting = {path: 0 for path, _ in model.named_modules()}

    def count(path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            frames_seen[path] = counting[path]
            counting[path] += 1

        return hook

    counters = [m.register_forward_pre_hook(count(p)) for p, m in model.named_modules()]
    try:
        with watch.watching(model), watch:
            run()
    finally:
        for handle in counters:
            handle.remove()
    for path, ops in found.items():
        for label, info in ops.items():
            info.calls = len(calls[path][label])
    return {path: list(ops.values()) for path, ops in found.items()}
