"""The hooks a capture attaches: which modules (calls, output elements) they keep, their inputs through
pre-hooks, op values through an ``OpWatch``, and the early stop once every wanted call has run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..errors import LayerError
from ..model.layers import LayerTarget, call_out_of_range
from ..model.opinfo import OpInfo
from ..model.outputs import leaves
from ..model.tree import is_container
from ..store.folder.captured import Key
from .copies import add, clock
from .opvalues import OpValues


def _caller(path: str, modules: dict[str, nn.Module]) -> str:
    """The nearest ancestor of ``path`` whose own forward does work ("" for the root)."""
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        forward = type(modules[name]).forward
        if not is_container(modules[name]) and forward is not nn.Sequential.forward:
            return name
    return ""


class EarlyStop(BaseException):
    """Raised from a hook once everything wanted has been captured; a BaseException, so that model code
    with a broad ``except Exception`` fallback cannot swallow it and run on."""


class Hooks:
    """The hooks of one ``Recorder`` (its Args name the options): attached by ``attach``, removed by
    ``remove``; each hands what it sees to ``keep`` (key, value) and counts its module's calls in a pass.

    Args:
        expected_calls: calls per forward from the inventory; with it the forward stops early (the
            ``Recorder`` passes None with grad).
    """

    def __init__(
        self,
        targets: list[LayerTarget],
        what: str,
        keep: Callable[[Key, Any], None],
        expected_calls: dict[str, int] | None,
        finished: dict[str, int],
        save_as: dict[str, tuple[str, str]],
        op_values: dict[str, OpInfo],
    ) -> None:
        self.op_values = op_values
        self._ops = OpValues(self.op_values, self._op_ran, self._op_returned) if self.op_values else None
        self._ops_ran: set[str] = set()  # op values seen in this pass
        self.what = what
        self._keep_now = keep
        self.selected: dict[str, set[int] | None] = {}
        self.elements = _elements(targets)
        for target in targets:
            calls = self.selected.get(target.path, set())
            self.selected[target.path] = (
                None if target.call is None or calls is None else calls | {target.call}
            )
        self.last_call = self._last_calls(expected_calls) if expected_calls is not None else None
        self.finished = finished
        self.save_as = save_as
        self.calls: dict[str, int] = dict.fromkeys(self.selected, 0)
        self.calls_per_forward: dict[str, int] = dict.fromkeys(self.selected, 0)
        self._stop_in_target: set[str] = set()
        self._handles: list[RemovableHandle] = []

    def _last_calls(self, expected: dict[str, int]) -> dict[str, int]:
        return {p: max(s) if s else expected.get(p, 1) - 1 for p, s in self.selected.items()}

    def attach(self, model: nn.Module) -> None:
        """Every hook on ``model``; none is left when attaching fails."""
        modules = dict(model.named_modules())
        try:
            if self._ops is not None:  # first: an owner's call is counted before its stop check runs
                self._handles += self._ops.attach(model)
            for path in self.selected:
                if path in self.op_values:
                    continue
                module = modules[path]
                if self.what in ("input", "both") and path not in self.save_as:
                    self._handles.append(
                        module.register_forward_pre_hook(self._pre_hook(path), with_kwargs=True)
                    )
                self._handles.append(module.register_forward_hook(self._hook(path)))
            for parent in self._stop_parents(modules):
                self._handles.append(modules[parent].register_forward_hook(self._stop_if_done))
        except BaseException:
            self.remove()
            raise

    def _stop_parents(self, modules: dict[str, nn.Module]) -> set[str]:
        """Where the early stop is checked: for each target, the nearest ancestor with a forward of its own
        (not a ModuleList, not a plain Sequential), so that an in-place op there (PosConv's ``x += ...``)
        still runs and is seen; the target itself when that ancestor would be the root."""
        self._stop_in_target = set()
        parents = set()
        for path in self.selected if self.last_call is not None else ():
            owner = path.rpartition(":")[0] if path in self.op_values else _caller(path, modules)
            if not owner and path in self.op_values:  # the root's own op: the forward runs to its end
                self.last_call, self._stop_in_target = None, set()
                return set()
            if owner:
                parents.add(owner)
            else:
                self._stop_in_target.add(path)
        stops = parents | self._stop_in_target
        if (
            stops
            and self.finished
            and max(self.finished.get(s, -1) for s in stops) >= max(self.finished.values())
        ):
            self.last_call = (
                None  # it would stop where the forward ends anyway: nothing to skip, nothing to say
            )
            self._stop_in_target = set()
            return set()
        return parents

    def remove(self) -> None:
        """Every hook removed."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def begin(self, model_label: str) -> None:
        """Before each pass: no call counted yet (``model_label``: the model's name, for errors)."""
        if self._ops is not None:
            self._ops.label = model_label
        self.calls = dict.fromkeys(self.selected, 0)
        self._ops_ran.clear()

    def leave(self) -> None:
        """After each pass, whatever stopped it: the op watch left."""
        if self._ops is not None:
            self._ops.leave()

    def _wanted(self, path: str, call: int) -> bool:
        selected = self.selected[path]
        return selected is None or call in selected

    def _pre_hook(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            start = clock()
            call = self.calls[path]
            if self._wanted(path, call):
                for name, value in [*enumerate(args), *kwargs.items()]:
                    for index, leaf in leaves(value, str(name)):
                        self._keep((path, "input", index, call), leaf)
            add("hooks", start)

        return hook

    def _hook(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            start = clock()
            call = self.calls[path]
            self.calls[path] += 1
            layer, kind = self.save_as.get(path, (path, "output"))
            if (self.what in ("output", "both") or kind != "output") and self._wanted(path, call):
                found = leaves(output)
                if path in self.elements:  # feat:K of one tensor of a tuple: that one only
                    tensors = [item for item in found if isinstance(item[1], torch.Tensor)]
                    found = [item for n, item in enumerate(tensors) if n in self.elements[path]]
                for index, leaf in found:
                    self._keep((layer, kind, index, call), leaf)
            add("hooks", start)
            if path in self._stop_in_target:
                self._stop_if_done()

        return hook

    def _op_returned(self, name: str) -> None:
        self.calls[name] += 1

    def _op_ran(self, name: str, call: int, result: Any) -> None:
        """A wanted op returned in its module's ``call``: keep its result if that call is wanted."""
        if self._wanted(name, call):
            self._ops_ran.add(name)
            start = clock()
            for index, leaf in leaves(result):
                self._keep((name, "output", index, call), leaf)
            add("hooks", start)

    def _stop_if_done(self, *hook_args: Any) -> None:
        if self.last_call is not None and all(self.calls[p] > c for p, c in self.last_call.items()):
            raise EarlyStop

    def _keep(self, key: Key, value: Any) -> None:
        if self._ops is None:
            self._keep_now(key, value)
            return
        with self._ops.muted():  # its copies are no op of the module whose forward runs
            self._keep_now(key, value)

    def check_fired(self, model_label: str) -> None:
        """After a pass: every selected layer (and call, and op value) ran in it; its calls counted."""
        for path, selected in self.selected.items():
            count = self.calls[path]
            if count == 0:
                raise LayerError(
                    f"`{path}` did not fire during the forward pass of {model_label}.",
                    "The module is part of the model but its forward was not called for this input;"
                    f" `hookdump list-modules {model_label}` shows the modules that run.",
                )
            if path in self.op_values and path not in self._ops_ran:
                raise LayerError(
                    f"`{path}` did not run in the forward pass of {model_label}: its module ran, but its"
                    " forward took another path for these inputs than in the traced pass.",
                    f"`hookdump list-modules {model_label} --ops` lists the ops each module runs.",
                )
            missing = sorted(c for c in (selected or ()) if c >= count)
            if missing:
                raise call_out_of_range(path, missing[0], count)
            self.calls_per_forward[path] = max(self.calls_per_forward[path], count)


def _elements(targets: list[LayerTarget]) -> dict[str, frozenset[int]]:
    """The layers of which only some output tensors are wanted (``LayerTarget.elements``)."""
    wanted: dict[str, frozenset[int] | None] = {}
    for target in targets:
        have = wanted.get(target.path, frozenset())
        wanted[target.path] = None if target.elements is None or have is None else have | target.elements
    return {path: chosen for path, chosen in wanted.items() if chosen is not None}
