"""Values a module computes in its own forward, not in a child's: the residual ``x + ...`` of a transformer
block, ``softmax`` inside an attention module, ``F.gelu`` in forward code. Each is named ``PATH:OP``: ``OP``
is the torch function's readable name (``x + y``, ``x.add(y)``, ``torch.add(x, y)`` and ``x += y`` are all
``add``), with ``_1``, ``_2``, ... for its later uses in the same call of the module, in the order the
forward runs them (``blocks.3:add``, ``blocks.3:add_1``); the root module's own are ``:OP``. Ops that return
no tensor (sizes, shapes) get no name.

:class:`OpWatch` is a ``TorchFunctionMode`` that names the ops of whichever module's forward is innermost,
with a frame per module call pushed and popped by hooks on the modules watched (a child's frame records
nothing for its parent). ``discover`` (``opinfo.py``) runs it over one traced pass (the meta device, like the
rest of the inventory) and lists each module's own ops with their output shapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

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
    """One call of one watched module: its path, which call of it this is, and how often each op ran in it
    so far. A ``quiet`` frame (a module called inside one whose ops are wanted) names nothing: its ops are
    not the outer module's."""

    path: str
    counts: dict[str, int] = field(default_factory=dict)
    call: int = 0
    quiet: bool = False

    def label(self, op: str) -> str:
        """``op`` for its first use in this call, ``op_1``, ``op_2``, ... after."""
        n = self.counts.get(op, 0)
        self.counts[op] = n + 1
        return op if n == 0 else f"{op}_{n}"


Seen = Callable[[Frame, str, Any, bool], None]  # (the module call, op label, result, in place)


class OpWatch(TorchFunctionMode):
    """While entered, every torch function that returns a tensor, run by the innermost watched module call,
    is named and handed to ``seen(frame, label, result, in place)``; outside any frame, nothing is; ``done``
    gets each frame when its call returns.

    ``attach`` pushes a frame when a watched module's forward starts and pops it when it ends. ``scoped``:
    the mode enters itself with the first frame and leaves with the last, so that only the forwards of the
    modules whose ops are wanted pay for it; ``leave`` undoes what an exception that skipped the forward
    hooks left (``always_call`` hooks do not run for a ``BaseException``)."""

    def __init__(self, seen: Seen, scoped: bool = False, done: Callable[[Frame], None] | None = None) -> None:
        super().__init__()
        self.seen = seen
        self.done = done  # called with each call's frame (not a quiet one) when the call returns
        self.scoped = scoped
        self.entered = False
        self.frames: list[Frame] = []
        self.muted = 0  # > 0 while hookdump's own hooks run: their copies are no op of the model
        self.calls: dict[str, int] = {}  # module path -> its calls so far (``leave`` resets them)
        self.callees: dict[str, set[str]] = {}  # module path -> the modules its calls called

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        if self.frames and not self.muted and not self.frames[-1].quiet and tensor_shapes(result):
            named = op_name(func)
            if named is not None:
                frame = self.frames[-1]
                self.seen(frame, frame.label(named[0]), result, named[1])
        return result

    def attach(
        self, model: nn.Module, loud: set[str] | None = None, quiet: set[str] | frozenset[str] = frozenset()
    ) -> list[RemovableHandle]:
        """Hooks that keep the frames: on every module (``loud`` None), or on the ``loud`` modules, whose ops
        are named, and on the ``quiet`` ones, which push a frame that names nothing while a loud one runs."""
        handles = []
        for path, module in model.named_modules():
            if isinstance(module, torch.jit.ScriptModule):
                continue  # takes no pre-hook, and runs no torch function seen from Python
            if loud is None or path in loud or path in quiet:
                is_quiet = loud is not None and path not in loud
                handles.append(module.register_forward_pre_hook(self._push(path, is_quiet)))
                handles.append(module.register_forward_hook(self._pop(path), always_call=True))
        return handles

    @contextmanager
    def watching(self, model: nn.Module) -> Iterator[None]:
        """Every module's frames, the hooks removed after."""
        handles = self.attach(model)
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            self.leave()

    def leave(self) -> None:
        """Leave the mode if ``scoped`` entered it, forget the frames and the calls counted."""
        if self.entered:
            self.entered = False
            self.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        self.frames.clear()
        self.calls.clear()

    def _push(self, path: str, quiet: bool) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            if quiet and not self.frames:
                return  # called outside the modules whose ops are wanted
            if self.frames:
                self.callees.setdefault(self.frames[-1].path, set()).add(path)
            call = self.calls.get(path, 0)
            self.calls[path] = call + 1
            if self.scoped and not self.frames:
                self.__enter__()  # type: ignore[no-untyped-call]
                self.entered = True
            self.frames.append(Frame(path, call=call, quiet=quiet))

        return hook

    def _pop(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self.frames and self.frames[-1].path == path:
                frame = self.frames.pop()
                if self.scoped and not self.frames and self.entered:
                    self.entered = False
                    self.__exit__(None, None, None)  # type: ignore[no-untyped-call]
                if self.done is not None and not frame.quiet:
                    self.done(frame)

        return hook


def base_of(label: str) -> str:
    """The torch function an op label names: ``add`` of ``add_1`` (``Frame.label``)."""
    return re.sub(r"_[0-9]+$", "", label)
