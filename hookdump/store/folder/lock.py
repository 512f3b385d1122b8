"""One capture at a time per output folder: a kernel lock (``flock``) on ``OUT/.hookdump.lock``.

The kernel drops the lock when its process dies, even by SIGKILL, so a lock file left by a dead run is
recognised as stale and simply taken over. A forked child (a decoding worker) lets go of its copy of the
descriptor at once: a flock lives while any copy is open, and workers outlive a killed parent by seconds.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
import weakref
from pathlib import Path

from ...errors import UsageError

LOCK_FILE = ".hookdump.lock"

_HELD: weakref.WeakSet[OutputLock] = weakref.WeakSet()


class OutputLock:
    """Hold ``out``'s lock from ``acquire`` to ``release``; a second holder is refused (exit 2)."""

    def __init__(self, out: Path) -> None:
        self.path = out / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise naming the run that holds it."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise _busy(self.path.parent, holder) from None
            # The holder before us may have removed the file after we opened it: lock the file that is there.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        _HELD.add(self)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {_now()}\n".encode(), 0)

    def release(self) -> None:
        """Remove the lock file and let go (idempotent)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
            _HELD.discard(self)


def _let_go_in_child() -> None:
    """Right after a fork, in the child: close its copies of the held locks' descriptors. Only the
    child's reference goes (no LOCK_UN, which would unlock the parent too); the parent keeps its lock."""
    for held in list(_HELD):
        if held._fd is not None:
            os.close(held._fd)
            held._fd = None
    _HELD.clear()


os.register_at_fork(after_in_child=_let_go_in_child)


def check_free(out: Path) -> None:
    """Raise the error ``acquire`` would, without taking the lock (``--dry-run``)."""
    path = out / LOCK_FILE
    if not path.is_file():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(out, _read(fd)) from None
    finally:
        os.close(fd)


def _busy(out: Path, holder: str) -> UsageError:
    return UsageError(
        f"`{out}` is being written by another hookdump capture ({holder or 'its process holds the lock'}).",
        "Wait for it to finish, or choose another --out.",
    )


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")
