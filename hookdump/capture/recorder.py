"""Hooks that copy what they see at hook time: per call, per output element, inputs, gradients."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..errors import LayerError
from ..model.layers import LayerTarget, call_out_of_range
from ..model.ops import OpInfo
from ..model.outputs import leaves, tensor_shapes
from ..model.tree import is_container
from ..store.folder import profile
from ..store.folder.records import Captured, Key, key_from_json
from . import scores
from .opvalues import OpValues
from .reduce import prefix_of
from .reduce import reduce as pool


def _caller(path: str, modules: dict[str, nn.Module]) -> str:
    """The nearest ancestor of ``path`` whose own forward does work ("" for the root)."""
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        forward = type(modules[name]).forward
        if not is_container(modules[name]) and forward is not nn.Sequential.forward:
            return name
    return ""


class _EarlyStop(BaseException):
    """Raised from a hook once everything wanted has been captured; a BaseException, so that model code
    with a broad ``except Exception`` fallback cannot swallow it and run on."""


class Recorder:
    """Attach hooks on enter, remove every one on exit, whatever happened in between.

    Args:
        model: the module to hook.
        targets: resolved layer targets.
        what: "output", "input" or "both".
        grad: also keep the gradient of every captured output (tensor hooks, which survive in-place ops).
        expected_calls: calls per forward from the inventory; with it (and no grad) the forward stops early,
            once every wanted call has run and the module around the last one returns (so an in-place op
            there is still seen).
        finished: when each module last returned in the traced pass; early stop is not armed when the point
            where it would stop is the last module to return (nothing would be skipped).
        reduce: ``--reduce``: pool each tensor at hook time (``reduce.reduce``).
        save_as: targets whose output is kept under another layer and kind: ``--attention`` keeps the output
            of ``X.attn_drop`` as ``(X, "attn")``.
        channels_last: layers whose 4-D maps are ``(N, H, W, C)``, so that ``reduce`` pools the right axes.
        tokens: the model's (patch, prefix) token counts (``reduce.token_layout``): a mean or max of a
            token map leaves the prefix tokens out, as timm's average pooling does.
        op_values: the targets that are values computed in a module's own forward (``PATH:OP``), as the
            traced pass found them (``OpInfo``: the modules their module calls, how many ops of their
            function each call ran): an ``OpWatch`` runs only while such a module's forward does, and copies
            each wanted op's result when it returns.
    """

    def __init__(
        self,
        model: nn.Module,
        targets: list[LayerTarget],
        what: str = "output",
        grad: bool = False,
        expected_calls: dict[str, int] | None = None,
        finished: dict[str, int] | None = None,
        reduce: str = "none",
        save_as: dict[str, tuple[str, str]] | None = None,
        channels_last: set[str] | frozenset[str] = frozenset(),
        tokens: tuple[int, int] | None = None,
        op_values: dict[str, OpInfo] | None = None,
    ) -> None:
        self.model = model
        self.op_values = op_values or {}
        self._ops = OpValues(self.op_values, self._op_ran, self._op_returned) if self.op_values else None
        self._ops_ran: set[str] = set()  # op values seen in this pass
        self.what = what
        self.grad = grad
        self.selected: dict[str, set[int] | None] = {}
        self.elements = _elements(targets)
        for target in targets:
            calls = self.selected.get(target.path, set())
            self.selected[target.path] = (
                None if target.call is None or calls is None else calls | {target.call}
            )
        self.last_call = self._last_calls(expected_calls) if expected_calls is not None and not grad else None
        self.finished = finished or {}
        self.reduce = reduce
        self.save_as = save_as or {}
        self.channels_last = channels_last
        self.tokens = tokens  # (patch, prefix) tokens: a mean / max leaves the prefix out
        self.prefix_left_out: dict[str, int] = {}  # layer -> prefix tokens --reduce left out
        # What one pass found, merged after it: a compiled graph guards on the dicts its hooks write to, so
        # they start empty in every pass (a dict that grew would compile the model again).
        self._prefix_now: dict[str, int] = {}
        self._other_now: dict[Key, str] = {}
        self.batch: dict[Key, torch.Tensor] = {}  # this forward pass's copies, until drained
        self.seen: dict[Key, None] = {}  # every key ever captured, in order
        self.other: dict[Key, str] = {}  # non-tensor leaves, as repr
        self.modified: set[Key] = set()
        self.calls: dict[str, int] = dict.fromkeys(self.selected, 0)
        self.calls_per_forward: dict[str, int] = dict.fromkeys(self.selected, 0)
        self.stopped_early = False
        self._live: list[tuple[Key, torch.Tensor, int]] = []
        self._deferred: list[tuple[Key, torch.Tensor, int]] = []  # kept by reference until the pass ends
        self._eager: set[Key] = set()  # copied at hook time, always: changed in place in some pass
        self._stop_in_target: set[str] = set()
        self._handles: list[RemovableHandle] = []

    def _last_calls(self, expected: dict[str, int]) -> dict[str, int]:
        return {p: max(s) if s else expected.get(p, 1) - 1 for p, s in self.selected.items()}

    def __enter__(self) -> Recorder:
        modules = dict(self.model.named_modules())
        try:
            if self._ops is not None:  # first: an owner's call is counted before its stop check runs
                self._handles += self._ops.attach(self.model)
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
            self._remove()
            raise
        return self

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

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _wanted(self, path: str, call: int) -> bool:
        selected = self.selected[path]
        return selected is None or call in selected

    def _pre_hook(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            start = _clock()
            call = self.calls[path]
            if self._wanted(path, call):
                for name, value in [*enumerate(args), *kwargs.items()]:
                    for index, leaf in leaves(value, str(name)):
                        self._keep((path, "input", index, call), leaf)
            _add("hooks", start)

        return hook

    def _hook(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            start = _clock()
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
            _add("hooks", start)
            if path in self._stop_in_target:
                self._stop_if_done()

        return hook

    def _op_returned(self, name: str) -> None:
        self.calls[name] += 1

    def _op_ran(self, name: str, call: int, result: Any) -> None:
        """A wanted op returned in its module's ``call``: keep its result if that call is wanted."""
        if self._wanted(name, call):
            self._ops_ran.add(name)
            start = _clock()
            for index, leaf in leaves(result):
                self._keep((name, "output", index, call), leaf)
            _add("hooks", start)

    def _stop_if_done(self, *hook_args: Any) -> None:
        if self.last_call is not None and all(self.calls[p] > c for p, c in self.last_call.items()):
            raise _EarlyStop

    def _keep(self, key: Key, value: Any) -> None:
        if self._ops is None:
            self._keep_now(key, value)
            return
        with self._ops.muted():  # its copies are no op of the module whose forward runs
            self._keep_now(key, value)

    def _keep_now(self, key: Key, value: Any) -> None:
        if not isinstance(value, torch.Tensor):
            self._other_now[key] = repr(value)
            return
        # A copy now: later in-place ops in forward (timm's PosConv does `x += ...`) must not reach it.
        self._store(key, value)
        if _compiling():
            return  # traced by torch.compile (``compiled.py``): the copy is in the graph, at hook time
        self._live.append((key, value, value._version))
        if self.grad and key[1] == "output" and value.requires_grad:
            grad_key = (key[0], "grad", key[2], key[3])

            def keep_grad(grad: torch.Tensor) -> None:
                self._store(grad_key, grad)

            value.register_hook(keep_grad)  # type: ignore[no-untyped-call]

    def _store(self, key: Key, tensor: torch.Tensor) -> None:
        prefix = prefix_of(tensor, self.reduce, self.tokens)
        if prefix:
            self._prefix_now[key[0]] = prefix
        start = _clock()
        pooled = pool(tensor.detach(), self.reduce, key[0] in self.channels_last, prefix)
        start = _add("reduce", start)
        on_cpu = pooled.device.type == "cpu" and not self.grad
        if self.reduce in ("mean", "max") and pooled.dim() != tensor.dim() and (on_cpu or _compiling()):
            self.batch[key] = pooled  # a new tensor that only this dict holds: nothing to copy
        elif _compiling():
            self.batch[key] = pooled.clone()  # in the compiled graph: later in-place ops cannot reach it
        elif on_cpu and key in self.seen and not (key in self._eager or key in self.modified) and _SHARERS:
            self.batch[key] = pooled  # checked when the pass ends (_settle), copied then if need be
            self._deferred.append((key, pooled, pooled._version))
        else:
            self.batch[key] = pooled.to("cpu", copy=True)
        _add("copy", start)
        if not _compiling():
            self.seen[key] = None  # (after a compiled pass: ``run``)

    def drain(self) -> dict[Key, torch.Tensor]:
        """The copies of the last forward pass (and backward), handed over and forgotten."""
        batch, self.batch = self.batch, {}
        return batch

    def run(
        self,
        batch: torch.Tensor,
        model_label: str,
        target: int | None = None,
        forward: Callable[[torch.Tensor], Any] | None = None,
    ) -> list[int]:
        """One forward pass (and backward, with grad); every selected layer (and call) must fire in it.
        ``forward``: what runs the model, when not the model itself (its compiled form: ``compiled.py``).

        Returns the class whose score was differentiated for each image (empty without grad).
        """
        forward = self.model if forward is None else forward
        if self._ops is not None:
            self._ops.label = model_label
        while True:
            self.calls = dict.fromkeys(self.selected, 0)
            self._prefix_now, self._other_now = {}, {}
            self._live.clear()
            self._deferred.clear()
            self._ops_ran.clear()
            start = profile.clock()
            try:
                output = forward(batch)
            except _EarlyStop:
                self.stopped_early = True
                output = None
            finally:
                if self._ops is not None:
                    self._ops.leave()
            profile.add("model", start)  # the hooks' time included (profile.dump takes it out)
            for key, kept in self.batch.items():  # a compiled graph's copies stay on its device
                if kept.device.type != "cpu":
                    self.batch[key] = kept.to("cpu")
                self.seen.setdefault(key, None)
            self.prefix_left_out |= self._prefix_now
            self.other |= self._other_now
            self.modified |= {key for key, live, version in self._live if live._version != version}
            self._live.clear()
            if not self.grad:
                output = None  # (the last layer's output may be a captured tensor: see _settle)
            if self._settle():
                break
        self._deferred.clear()
        self._check_fired(model_label)
        return self._backward(output, target, model_label) if self.grad else []

    def _settle(self) -> bool:
        """After a pass: each tensor kept by reference (``_store``, a key that an earlier pass saw and that
        nothing has changed in place so far) is its hook-time self if its version counter did not move; kept
        as it is where no other tensor shares its storage (nothing can change it later), copied now where
        one does (the model may hold it). False, the batch to be run again with those keys copied at hook
        time, when one was changed in place after its hook (its hook-time values are gone)."""
        start = profile.clock()
        lost = {key for key, kept, version in self._deferred if kept._version != version}
        if lost:
            self._eager |= lost
            self.batch.clear()
            return False
        for key, kept, _ in self._deferred:
            if _SHARERS is None or _SHARERS(kept.untyped_storage()._cdata) > 2:  # it and our Python handle
                self.batch[key] = kept.clone()
        profile.add("copy", start)
        return True

    def _backward(self, output: Any, target: int | None, model_label: str) -> list[int]:
        scores.check(tensor_shapes(output), target, model_label, isinstance(output, torch.Tensor))
        classes = output.argmax(dim=1) if target is None else torch.full_like(output[:, 0], target).long()
        output.gather(1, classes[:, None]).sum().backward()
        return [int(c) for c in classes]

    def _check_fired(self, model_label: str) -> None:
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

    def state(self) -> dict[str, Any]:
        """What the finished batches taught: kept keys, calls, in-place changes, non-tensor values (JSON)."""
        return {
            "seen": [list(k) for k in self.seen],
            "other": [[*k, v] for k, v in self.other.items()],
            "modified": [list(k) for k in self.modified],
            "calls_per_forward": dict(self.calls_per_forward),
            "stopped_early": self.stopped_early,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state()`` of an interrupted run (``--resume``)."""
        self.seen = {key_from_json(k): None for k in state["seen"]}
        self.other = {key_from_json(k[:4]): k[4] for k in state["other"]}
        self.modified = {key_from_json(k) for k in state["modified"]}
        self.calls_per_forward.update(state["calls_per_forward"])
        self.stopped_early = state["stopped_early"]

    def entries(self) -> list[Captured]:
        """Every captured tensor, ordered by layer, call, then input / output / grad; each with ``order``,
        when its hook ran in the first forward (``seen`` keeps them so, and ``--resume`` restores it)."""
        order = {path: i for i, path in enumerate(self.selected)}
        rank = {"input": 0, "output": 1, "grad": 2, "attn": 3}
        ran = {key: i for i, key in enumerate(self.seen)}
        keys = sorted(self.seen, key=lambda k: (order[k[0]], k[3], rank[k[1]]))
        return [
            Captured(*key, self.calls_per_forward[key[0]], key in self.modified, order=ran[key])
            for key in keys
        ]


def _compiling() -> bool:
    """Whether this hook is being traced by ``torch.compile`` (``--compile``): then no timers (dynamo does
    not trace ``time.perf_counter``), no version counters, and every tensor is copied in the graph."""
    return torch.compiler.is_compiling()


def _clock() -> float:
    return 0.0 if _compiling() else profile.clock()


def _add(name: str, since: float) -> float:
    return 0.0 if _compiling() else profile.add(name, since)


# How many holders a storage has (tensors, and the Python handle asked for): a private torch function, so
# every tensor is copied at hook time, as before, where this torch has none.
_SHARERS: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def _elements(targets: list[LayerTarget]) -> dict[str, frozenset[int]]:
    """The layers of which only some output tensors are wanted (``LayerTarget.elements``)."""
    wanted: dict[str, frozenset[int] | None] = {}
    for target in targets:
        have = wanted.get(target.path, frozenset())
        wanted[target.path] = None if target.elements is None or have is None else have | target.elements
    return {path: chosen for path, chosen in wanted.items() if chosen is not None}
