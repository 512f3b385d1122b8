"""How far a capture is, on stderr: a rich progress bar on a terminal; elsewhere (a CI log, a pipe,
``TERM=dumb``) a plain line every few seconds (none for a run shorter than that); nothing with ``--quiet``."""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import Any

from ..units import human_bytes

PLAIN_EVERY_S = 5.0


def _terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


class Progress:
    """``update(done, total, bytes)`` after each batch; use as a context manager around the capture."""

    def __init__(self, enabled: bool = True, every: float = PLAIN_EVERY_S) -> None:
        self.enabled = enabled
        self.every = every
        self.started = time.monotonic()
        self._last = self.started
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.enabled and _terminal():
            from rich import progress as rich

            self._bar = rich.Progress(
                rich.TextColumn("capture"), rich.BarColumn(), rich.MofNCompleteColumn(),
                rich.TextColumn("images {task.fields[rate]}"), rich.TimeRemainingColumn(),
                rich.TextColumn("{task.fields[written]}"),
                transient=True, redirect_stdout=False, redirect_stderr=False,
            )  # fmt: skip
            self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)

    def update(self, done: int, total: int, written: int) -> None:
        """One batch reached the disk."""
        if not self.enabled:
            return
        now = time.monotonic()
        rate = done / max(now - self.started, 1e-9)
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task("capture", total=total, rate="", written="")
            self._bar.update(self._task, completed=done, rate=f"{rate:.1f}/s", written=human_bytes(written))
        elif now - self._last >= self.every and done < total:  # the last batch: the summary says it
            self._last = now
            eta = (total - done) / rate if rate > 0 else 0.0
            print(
                f"hookdump: {done}/{total} images, {rate:.1f} images/s, ETA {_clock(eta)},"
                f" {human_bytes(written)} written",
                file=sys.stderr,
                flush=True,
            )


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
