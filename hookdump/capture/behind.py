"""Work done behind the caller on a thread (the writer: a batch's tensors reach the disk while the next
batch goes through the model), in order, never holding more than a set number of bytes while the caller
goes on."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..units import available_memory


class Behind:
    """Runs ``work(item)`` on a thread, in order, so that a batch is written while the next one goes
    through the model. ``put(item, nbytes)`` returns once what the thread still holds is at most
    ``max_bytes`` (the item just put included; 0: the item is done) and at most ``depth`` items are not
    done; ``work`` calls ``release(n)`` as it lets go of ``n`` bytes of its item (what it did not release is
    released when it returns). An error in the thread is raised at the next ``put`` or at ``close``."""

    def __init__(self, work: Callable[[Any], None], max_bytes: int | None = None, depth: int = 2) -> None:
        self.max_bytes = max_bytes  # None: no bound in bytes
        self.depth = depth
        self.held = 0  # bytes put and not released yet
        self.peak = 0  # the most ``held`` ever was
        self._items: deque[tuple[Any, int]] = deque()
        self._unreleased = 0  # of the item in work
        self._open = 0  # items put and not done
        self._closing = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, args=(work,), name="hookdump-writer", daemon=True)
        self._thread.start()

    def _loop(self, work: Callable[[Any], None]) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._items or self._closing)
                if not self._items:
                    return
                item, nbytes = self._items.popleft()
                self._unreleased = nbytes
            if self._error is None:  # after an error, items are taken and dropped: the caller never blocks
                try:
                    work(item)
                except BaseException as exc:
                    self._error = exc
            del item
            with self._changed:
                self.held -= self._unreleased
                self._unreleased = 0
                self._open -= 1
                self._changed.notify_all()

    def release(self, nbytes: int) -> None:
        """From ``work``: it let go of ``nbytes`` of its item (a tensor written and dropped)."""
        with self._changed:
            nbytes = min(nbytes, self._unreleased)
            self._unreleased -= nbytes
            self.held -= nbytes
            self._changed.notify_all()

    def put(self, item: Any, nbytes: int = 0) -> None:
        self._raise()
        with self._changed:
            self._items.append((item, nbytes))
            self.held += nbytes
            self._open += 1
            self.peak = max(self.peak, self.held)
            self._changed.notify_all()
            self._changed.wait_for(self._caught_up)
        self._raise()

    def _caught_up(self) -> bool:
        if self._error is not None or not self._thread.is_alive():
            return True
        within = self.max_bytes is None or self.held <= self.max_bytes or self._open == 0
        return within and self._open <= self.depth

    def close(self, errors: bool = True) -> None:
        """Wait until every item put is done (idempotent); ``errors``: raise the thread's error, if any."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()
        if errors:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


QUEUE_SHARE = 256  # by default the writer holds at most this share of the memory available at the start


def queue_bytes(max_queue_mb: float | None) -> int:
    """The writer's bound in bytes: ``--max-queue-mb``, or by default a share of the available memory."""
    if max_queue_mb is not None:
        return int(max_queue_mb * 2**20)
    return available_memory() // QUEUE_SHARE
