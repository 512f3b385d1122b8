"""The recorder's op values (``PATH:OP``): one ``OpWatch``, entered only while a module that owns a wanted op
runs its forward (its pre-hook) and left when that call returns (its forward hook, or ``leave`` after a pass
that an exception cut short), with quiet frames for the modules it calls. Each call of such a module is
checked to run as many ops of each wanted op's function as the traced pass did, so that a name never points
at another value."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle

from ..errors import LayerError
from ..model.opinfo import OpInfo
from ..model.ops import Frame, OpWatch


class OpValues:
    """Args:
    op_values: the wanted op values, as the traced pass found them (``OpInfo``).
    ran: called with (name, call of its module, result) when a wanted op returns.
    returned: called with each wanted name when a call of its module returns.
    """

    def __init__(
        self,
        op_values: dict[str, OpInfo],
        ran: Callable[[str, int, Any], None],
        returned: Callable[[str], None],
    ) -> None:
        self.op_values = op_values
        self.ran, self.returned = ran, returned
        self.label = "MODEL"  # the model's name, for errors (``Recorder.run`` sets it)
        self.owned: dict[str, list[str]] = {}  # module path -> its wanted op values
        for name, op in op_values.items():
            self.owned.setdefault(op.module, []).append(name)
        self.watch = OpWatch(self._seen, scoped=True, done=self._done)

    def attach(self, model: nn.Module) -> list[RemovableHandle]:
        """The frames' hooks: on the modules owning wanted ops, and on the modules they call (quiet)."""
        inside = {path for op in self.op_values.values() for path in op.callees} - set(self.owned)
        return self.watch.attach(model, set(self.owned), inside)

    def leave(self) -> None:
        """After each pass: the mode left, the frames and calls forgotten, whatever stopped it."""
        self.watch.leave()

    @contextmanager
    def muted(self) -> Iterator[None]:
        """hookdump's own work inside a watched forward (a hook's copies) is no op of the model."""
        self.watch.muted += 1
        try:
            yield
        finally:
            self.watch.muted -= 1

    def _seen(self, frame: Frame, label: str, result: Any, inplace: bool) -> None:
        name = f"{frame.path}:{label}"
        if name in self.op_values:
            self.ran(name, frame.call, result)

    def _done(self, frame: Frame) -> None:
        """A call of a module owning wanted op values returned: count it, and refuse a call that ran another
        number of ops of their function than the traced pass (a cache filled on the first pass, a branch on
        the data): their names would point at other values."""
        for name in self.owned[frame.path]:
            self.returned(name)
            op = self.op_values[name]
            if frame.call < len(op.per_call) and frame.counts.get(op.func, 0) != op.per_call[frame.call]:
                raise LayerError(
                    f"`{name}` cannot be captured: in this pass {op.module or 'the model'}'s forward ran"
                    f" {frame.counts.get(op.func, 0)} `{op.func}` op(s), where the traced pass ran"
                    f" {op.per_call[frame.call]} (its forward takes another path now: a cache it filled, or a"
                    " branch on the data), so the name would point at another value.",
                    "Capture the module's output or an op of another module; `hookdump list-modules"
                    f" {self.label} --ops` lists them.",
                )
