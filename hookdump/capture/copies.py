"""What the hooks keep, and how: a copy at hook time (pooled by ``--reduce``), a tensor kept by reference
only where its version counter proves nothing changed it in place, the in-place check after each pass, and
the gradient of a kept output (a tensor hook)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..store.folder import profile
from ..store.folder.captured import Key
from .landing import Landing, kept_dtype
from .reduce import prefix_of
from .reduce import reduce as pool


class Copies:
    """The tensors one ``Recorder`` keeps, by key (layer, kind, index, call); its Args name the options.

    ``batch``: this forward pass's copies, until drained; ``seen``: every key ever captured, in order;
    ``other``: non-tensor leaves, as repr; ``modified``: the keys changed in place after their hook;
    ``made_as``: the dtype the model made each key in (a copy is kept as ``--save-dtype`` where that is no
    wider: ``landing.kept_dtype``); ``landing``: where copies land on the host.
    """

    def __init__(
        self,
        grad: bool,
        reduce: str,
        channels_last: set[str] | frozenset[str],
        tokens: tuple[int, int] | None,
        save_dtype: str = "keep",
        landing: Landing | None = None,
    ) -> None:
        self.grad = grad
        self.save_dtype = save_dtype
        self.landing = landing or Landing(torch.device("cpu"))
        self.made_as: dict[Key, torch.dtype] = {}
        # Each copy handed to the writer at hook time, so the writer frees it while the pass goes on, and
        # nothing kept by reference (``settle`` then never runs a batch again): from the copy that takes a
        # pass's copies past the bytes ``offer`` names (``run.py``: the CPU, no grad, no compile).
        self.hand: Callable[[Key, torch.Tensor], None] | None = None
        self._offered: tuple[Callable[[Key, torch.Tensor], None], int] | None = None
        self._pass_bytes = 0  # what this pass's copies hold, until ``hand`` is set
        self.reduce = reduce
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
        self._live: list[tuple[Key, torch.Tensor, int]] = []
        self._deferred: list[tuple[Key, torch.Tensor, int]] = []  # kept by reference until the pass ends
        self._eager: set[Key] = set()  # copied at hook time, always: changed in place in some pass

    def offer(self, hand: Callable[[Key, torch.Tensor], None], after: int) -> None:
        """Hand each copy to ``hand`` at hook time once a pass's copies outweigh ``after`` bytes (the writer's
        queue bound): from that copy on, in the first such pass (the first batch too), and in every later
        one."""
        self._offered = (hand, after)

    def begin(self) -> None:
        """Before each pass: what it finds starts empty."""
        self._prefix_now, self._other_now = {}, {}
        self._pass_bytes = 0
        self._live.clear()
        self._deferred.clear()

    def keep(self, key: Key, value: Any) -> None:
        """What a hook saw: a tensor copied (or kept by reference: ``_store``), anything else as repr."""
        if not isinstance(value, torch.Tensor):
            self._other_now[key] = repr(value)
            return
        # A copy now: later in-place ops in forward (timm's PosConv does `x += ...`) must not reach it.
        self._store(key, value)
        if compiling():
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
        start = clock()
        pooled = pool(tensor.detach(), self.reduce, key[0] in self.channels_last, prefix)
        start = add("reduce", start)
        on_cpu = pooled.device.type == "cpu" and not self.grad
        if self.reduce in ("mean", "max") and pooled.dim() != tensor.dim() and (on_cpu or compiling()):
            self.batch[key] = pooled  # a new tensor that only this dict holds: nothing to copy
        elif compiling():
            self.batch[key] = pooled.clone()  # in the compiled graph: later in-place ops cannot reach it
        else:
            self.made_as[key] = pooled.dtype
            dtype = kept_dtype(pooled.dtype, self.save_dtype)
            if self.hand is None and self._offered is not None and not self._deferred:  # (after a reference,
                # a pass that ``settle`` runs again would have sent part of its copies already)
                self._pass_bytes += pooled.numel() * dtype.itemsize
                if self._pass_bytes > self._offered[1]:
                    self.hand = self._offered[0]
            if self.hand is not None:  # final at hook time: to the writer now, not when the pass ends
                copy = self.landing.copy(pooled, dtype, again=False)
                add("copy", start)
                self.seen[key] = None
                self.hand(key, copy)
                return
            by_reference = on_cpu and dtype == pooled.dtype and self._may_reference(key)
            if by_reference and key in self.seen:
                self.batch[key] = pooled  # checked when the pass ends (settle), copied then if need be
                self._deferred.append((key, pooled, pooled._version))
            else:  # a first sight of what later batches keep by reference: a buffer that does not come back
                self.batch[key] = self.landing.copy(pooled, dtype, again=not by_reference)
        add("copy", start)
        if not compiling():
            self.seen[key] = None  # (after a compiled pass: ``end``)

    def _may_reference(self, key: Key) -> bool:
        """Whether a CPU tensor of ``key`` may be kept by reference until the pass ends (``settle``) once an
        earlier pass saw it: nothing has changed it in place so far."""
        return not (key in self._eager or key in self.modified) and bool(_SHARERS)

    def end(self) -> None:
        """After each pass (stopped early or not): its copies on the CPU, what it found merged."""
        for key, kept in self.batch.items():  # a compiled graph's copies stay on its device
            if kept.device.type != "cpu":
                self.batch[key] = self.landing.copy(kept, kept.dtype, owned=True)
            self.seen.setdefault(key, None)
        self.prefix_left_out |= self._prefix_now
        self.other |= self._other_now
        self.modified |= {key for key, live, version in self._live if live._version != version}
        self._live.clear()

    def settle(self) -> bool:
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
        self._deferred.clear()
        return True

    def drain(self) -> dict[Key, torch.Tensor]:
        """The copies of the last forward pass (and backward), handed over and forgotten."""
        batch, self.batch = self.batch, {}
        return batch

    def fence(self) -> Callable[[], None]:
        """After a drain: what waits until the drained copies are on the host (``Landing.fence``)."""
        return self.landing.fence()


def compiling() -> bool:
    """Whether this hook is being traced by ``torch.compile`` (``--compile``): then no timers (dynamo does
    not trace ``time.perf_counter``), no version counters, and every tensor is copied in the graph."""
    return torch.compiler.is_compiling()


def clock() -> float:
    """``profile.clock()`` in a hook (0 where it is being compiled)."""
    return 0.0 if compiling() else profile.clock()


def add(name: str, since: float) -> float:
    """``profile.add`` in a hook (nothing where it is being compiled)."""
    return 0.0 if compiling() else profile.add(name, since)


# How many holders a storage has (tensors, and the Python handle asked for): a private torch function, so
# every tensor is copied at hook time, as before, where this torch has none.
_SHARERS: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)
