"""The ``Recorder`` a capture runs each batch through: its hooks (``hooks.py``) and what they keep
(``copies.py``), one pass after another until the copies settle, the backward pass with grad, and what the
batches taught, kept for ``--resume``."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch
from torch import nn

from ..model.layers import LayerTarget
from ..model.opinfo import OpInfo
from ..model.outputs import tensor_shapes
from ..store.folder import profile
from ..store.folder.captured import Captured, Key, key_from_json
from . import scores
from .copies import Copies
from .hooks import EarlyStop, Hooks
from .landing import Landing


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
        save_dtype: ``--save-dtype``: a copy is kept in it where it is no wider (``landing.kept_dtype``).
        landing: where the copies land on the host (``landing.Landing``; CPU buffers when not given).
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
        save_dtype: str = "keep",
        landing: Landing | None = None,
    ) -> None:
        self.model = model
        self.grad = grad
        self.reduce = reduce
        self.copies = Copies(grad, reduce, channels_last, tokens, save_dtype, landing)
        self.hooks = Hooks(
            targets, what, self.copies.keep, expected_calls if not grad else None, finished or {},
            save_as or {}, op_values or {},
        )  # fmt: skip
        self.selected = self.hooks.selected
        self.calls_per_forward = self.hooks.calls_per_forward
        self.stopped_early = False

    @property
    def batch(self) -> dict[Key, torch.Tensor]:
        """This forward pass's copies, until drained."""
        return self.copies.batch

    @property
    def other(self) -> dict[Key, str]:
        """Non-tensor leaves, as repr."""
        return self.copies.other

    @property
    def modified(self) -> set[Key]:
        """The keys changed in place later in the forward pass (saved as they were at hook time)."""
        return self.copies.modified

    @property
    def prefix_left_out(self) -> dict[str, int]:
        """Layer -> prefix tokens --reduce left out."""
        return self.copies.prefix_left_out

    def __enter__(self) -> Recorder:
        self.hooks.attach(self.model)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.hooks.remove()

    def drain(self) -> dict[Key, torch.Tensor]:
        """The copies of the last forward pass (and backward), handed over and forgotten."""
        return self.copies.drain()

    def fence(self) -> Callable[[], None]:
        """After a drain: what waits until the drained copies are on the host (from CUDA: an event)."""
        return self.copies.fence()

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
        while True:
            self.hooks.begin(model_label)
            self.copies.begin()
            start = profile.clock()
            try:
                output = forward(batch)
            except EarlyStop:
                self.stopped_early = True
                output = None
            finally:
                self.hooks.leave()
            profile.add("model", start)  # the hooks' time included (profile.dump takes it out)
            self.copies.end()
            if not self.grad:
                output = None  # (the last layer's output may be a captured tensor: see Copies.settle)
            if self.copies.settle():
                break
        self.hooks.check_fired(model_label)
        return self._backward(output, target, model_label) if self.grad else []

    def _backward(self, output: Any, target: int | None, model_label: str) -> list[int]:
        scores.check(tensor_shapes(output), target, model_label, isinstance(output, torch.Tensor))
        classes = output.argmax(dim=1) if target is None else torch.full_like(output[:, 0], target).long()
        output.gather(1, classes[:, None]).sum().backward()
        return [int(c) for c in classes]

    def state(self) -> dict[str, Any]:
        """What the finished batches taught: kept keys, calls, in-place changes, non-tensor values (JSON)."""
        return {
            "seen": [list(k) for k in self.copies.seen],
            "other": [[*k, v] for k, v in self.copies.other.items()],
            "modified": [list(k) for k in self.copies.modified],
            "calls_per_forward": dict(self.calls_per_forward),
            "stopped_early": self.stopped_early,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state()`` of an interrupted run (``--resume``)."""
        self.copies.seen = {key_from_json(k): None for k in state["seen"]}
        self.copies.other = {key_from_json(k[:4]): k[4] for k in state["other"]}
        self.copies.modified = {key_from_json(k) for k in state["modified"]}
        self.calls_per_forward.update(state["calls_per_forward"])
        self.stopped_early = state["stopped_early"]

    def entries(self) -> list[Captured]:
        """Every captured tensor, ordered by layer, call, then input / output / grad; each with ``order``,
        when its hook ran in the first forward (``seen`` keeps them so, and ``--resume`` restores it)."""
        seen = self.copies.seen
        order = {path: i for i, path in enumerate(self.selected)}
        rank = {"input": 0, "output": 1, "grad": 2, "attn": 3}
        ran = {key: i for i, key in enumerate(seen)}
        keys = sorted(seen, key=lambda k: (order[k[0]], k[3], rank[k[1]]))
        return [
            Captured(*key, self.calls_per_forward[key[0]], key in self.copies.modified, order=ran[key])
            for key in keys
        ]
