"""Where the hooks' copies land on the host: buffers from a small pool keyed by shape and dtype, reused once
the writer is done with them, so that a steady run allocates none per batch. From a CUDA tensor the copy
goes to pinned buffers on a side stream (``non_blocking``), with one event per batch that the writer waits
for before it reads them: batch k is written while batch k+1 goes through the model."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import torch

Shape = tuple[tuple[int, ...], torch.dtype]


def kept_dtype(made: torch.dtype, save_dtype: str) -> torch.dtype:
    """The dtype a hook's copy is kept in: ``--save-dtype`` where it is no wider than what the model made
    (converted once, in the copy, and never held wider than it is saved), else as made (widened by the
    writer, so that bf16 crosses to the host and waits in the queue at its own size)."""
    if save_dtype == "keep" or not made.is_floating_point:
        return made
    saved: torch.dtype = getattr(torch, save_dtype)
    return saved if saved.itemsize <= made.itemsize else made


class Pool:
    """Host buffers by shape and dtype (pinned for CUDA copies): ``take`` one, ``give`` it back once nothing
    reads it; at most ``keep`` free ones per shape, at most ``max_free`` bytes of them (None: no limit), and
    those of a shape no pass asked for are let go."""

    def __init__(self, pinned: bool, keep: int = 2) -> None:
        self.pinned = pinned
        self.keep = keep
        self.max_free: int | None = None  # set by ``Landing.bound``
        self.made = 0  # buffers allocated
        self.reused = 0  # buffers handed out again
        self._free: dict[Shape, list[torch.Tensor]] = {}
        self._free_bytes = 0  # what ``_free`` holds
        self._lent: dict[int, weakref.ref[torch.Tensor]] = {}  # id -> the buffer: only those come back
        self._asked: set[Shape] = set()  # the shapes taken since the last ``trim``
        self._lock = threading.Lock()  # the writer gives from its thread, the hooks take from theirs

    def take(
        self, shape: torch.Size | tuple[int, ...], dtype: torch.dtype, lend: bool = True
    ) -> torch.Tensor:
        """A contiguous buffer of ``shape`` and ``dtype``; its values are whatever it held. ``lend=False``: a
        new one that does not come back (a copy the next batches will not make: kept by reference then)."""
        key = (tuple(shape), dtype)
        if not lend:
            self.made += 1
            return torch.empty(key[0], dtype=dtype, pin_memory=self.pinned)
        with self._lock:
            self._asked.add(key)
            free = self._free.get(key)
            buffer = free.pop() if free else None
            if buffer is not None:
                self.reused += 1
                self._free_bytes -= buffer.nbytes
        if buffer is None:
            buffer = torch.empty(key[0], dtype=dtype, pin_memory=self.pinned)
            self.made += 1
        with self._lock:
            self._lent[id(buffer)] = weakref.ref(buffer)
        return buffer

    def give(self, tensor: torch.Tensor) -> None:
        """``tensor`` back for reuse if ``take`` lent it (anything else is left alone)."""
        with self._lock:
            lent = self._lent.pop(id(tensor), None)
            if lent is None or lent() is not tensor:
                return
            free = self._free.setdefault((tuple(tensor.shape), tensor.dtype), [])
            within = self.max_free is None or self._free_bytes + tensor.nbytes <= self.max_free
            if len(free) < self.keep and within:
                free.append(tensor)
                self._free_bytes += tensor.nbytes

    def trim(self) -> None:
        """After a pass: the free buffers of shapes it did not take go (a shape kept by reference after the
        first batch, the smaller last batch), and the record of buffers that died."""
        with self._lock:
            self._free = {key: free for key, free in self._free.items() if key in self._asked}
            self._free_bytes = sum(t.nbytes for free in self._free.values() for t in free)
            self._asked = set()
            self._lent = {i: ref for i, ref in self._lent.items() if ref() is not None}

    @property
    def free_bytes(self) -> int:
        """What the free buffers hold."""
        return self._free_bytes


class Landing:
    """The copies of one capture from ``device`` to the host, through a ``Pool``."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.pool = Pool(pinned=self.cuda)
        self._stream = torch.cuda.Stream(device) if self.cuda else None  # type: ignore[no-untyped-call]

    def bound(self, max_bytes: int | None) -> None:
        """Free host buffers are held through the next forward: on the CPU at most ``max_bytes`` of them (the
        writer's queue bound; 0 or None: no limit, a whole batch is written before the next one runs).
        Pinned buffers (CUDA) are all kept: pinning costs more than the memory."""
        if not self.cuda and max_bytes:
            self.pool.max_free = max_bytes

    def copy(
        self, tensor: torch.Tensor, dtype: torch.dtype, owned: bool = False, again: bool = True
    ) -> torch.Tensor:
        """``tensor`` as ``dtype`` in a host buffer (from the pool where the copy will be made ``again`` in
        later batches; a free buffer held until then would be memory the run does not need). From the CPU
        the copy is done when this returns. From CUDA it is first copied on the device in the model's stream
        (``owned``: a copy already, and as ``dtype``), so that an in-place op later in the forward pass
        cannot reach it, then to the host on the side stream: the buffer may be read once the event
        ``fence`` returns has passed."""
        if self._stream is None or tensor.device.type == "cpu":
            buffer = self.pool.take(tensor.shape, dtype, again)
            buffer.copy_(tensor)
            return buffer
        if owned and tensor.dtype == dtype and tensor.is_contiguous():
            source = tensor
        else:
            source = tensor.to(dtype=dtype, memory_format=torch.contiguous_format, copy=True)
        buffer = self.pool.take(source.shape, dtype)
        self._stream.wait_stream(torch.cuda.current_stream(tensor.device))
        with torch.cuda.stream(self._stream):
            buffer.copy_(source, non_blocking=True)
        source.record_stream(self._stream)  # its device memory is not reused before the copy is done
        return buffer

    def fence(self) -> Callable[[], None]:
        """After a batch: what waits until its copies are on the host (nothing to wait for from the CPU)."""
        self.pool.trim()
        if self._stream is None:
            return landed
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(self._stream)
        return event.synchronize


def landed() -> None:
    """What waits for copies from the CPU: they are on the host already."""
