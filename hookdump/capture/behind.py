"""Work done behind the caller on a thread (the writer: a batch's tensors reach the disk while the next
batch goes through the model), in order, never more than a set number of items behind."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Behind:
    """Runs ``work(item)`` on a thread, in order, at most ``depth`` items behind the caller, so that a batch
    is written while the next one goes through the model. An error in the thread is raised at the next
    ``put`` or at ``close``."""

    _STOP = object()

    def __init__(self, work: Callable[[Any], None], depth: int = 1) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, args=(work,), name="hookdump-writer", daemon=True)
        self._thread.start()

    def _loop(self, work: Callable[[Any], None]) -> None:
        while (item := self._queue.get()) is not self._STOP:
            if self._error is None:  # after an error, items are taken and dropped: the caller never blocks
                try:
                    work(item)
                except BaseException as exc:
                    self._error = exc

    def put(self, item: Any) -> None:
        self._raise()
        self._queue.put(item)

    def close(self, errors: bool = True) -> None:
        """Wait until every item put is done (idempotent); ``errors``: raise the thread's error, if any."""
        if self._thread.is_alive():
            self._queue.put(self._STOP)
            self._thread.join()
        if errors:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
