"""A file that grows at its end, written past the page cache (``O_DIRECT``) where the system allows it.

A capture writes gigabytes once and does not read them back. Through the page cache, every byte costs the
writing thread kernel time (pages found, zeroed, copied, later written back and reclaimed), taken from the
cores the model runs on. Written direct, the disk's controller fetches the bytes from a staging buffer and
the thread only waits. Whole 4 KiB blocks go direct; the last, partial block is written through the page
cache as well, so the file always holds every byte appended (a checkpoint can trust it), and is rewritten
direct, whole, by the next append. Where ``O_DIRECT`` is missing (macOS) or refused by the file system,
every write goes through the page cache.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

BLOCK = 4096  # alignment of offsets, lengths and memory for O_DIRECT: a multiple of every logical block size
STAGING = 8 << 20  # bytes copied into the aligned staging buffer per write
DIRECT = getattr(os, "O_DIRECT", 0)

_local = threading.local()


class AppendFile:
    """``append`` bytes at the end, ``write_at`` a few bytes before it (a header), ``truncate``, ``close``."""

    def __init__(self, path: Path, create: bool, direct: bool = True) -> None:
        """Open ``path`` (``create``: empty, made if missing); ``direct=False`` keeps every write cached,
        for a file that is read back at once."""
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self._fd = os.open(path, flags, 0o666)
        self._direct = -1
        if direct and DIRECT:
            with contextlib.suppress(OSError):  # the file system does not do direct I/O
                self._direct = os.open(path, os.O_WRONLY | DIRECT)
        with self.closed_on_error():
            self.size = os.fstat(self._fd).st_size
            self._tail = self._read_tail()

    @property
    def direct(self) -> bool:
        """Whether whole blocks still bypass the page cache."""
        return self._direct >= 0

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def append(self, data: memoryview | bytes) -> None:
        """Write ``data`` at the end of the file."""
        view = memoryview(data)
        if not view.nbytes:  # (an empty tensor's view cannot even be cast to bytes)
            return
        view = view.cast("B")
        if self.direct:
            try:
                self._append_direct(view)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._stop_direct()  # opened but refused (an alignment this file system does not take)
        _pwrite_all(self._fd, view, self.size)
        self.size += len(view)

    def write_at(self, offset: int, data: bytes) -> None:
        """Overwrite bytes already in the file (through the page cache)."""
        _pwrite_all(self._fd, memoryview(data), offset)
        if offset + len(data) > self.size - len(self._tail):
            self._tail = self._read_tail()

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes."""
        os.ftruncate(self._fd, size)
        self.size = size
        self._tail = self._read_tail()

    def sync(self) -> None:
        """``fdatasync``: every byte appended is on the disk (direct blocks too: a drive may cache them)."""
        getattr(os, "fdatasync", os.fsync)(self._fd)

    @contextlib.contextmanager
    def closed_on_error(self) -> Iterator[AppendFile]:
        """Close the file if the block fails (a full disk): an open descriptor would keep the disk busy."""
        try:
            yield self
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._fd < 0:
            return
        self._stop_direct()
        fd, self._fd = self._fd, -1
        os.close(fd)

    def _append_direct(self, view: memoryview) -> None:
        buffer = _staging()
        offset = self.size - len(self._tail)  # the partial block is written again, whole
        filled = len(self._tail)
        buffer[:filled] = self._tail
        done = 0
        while done < len(view):
            n = min(len(view) - done, STAGING - filled)
            buffer[filled : filled + n] = view[done : done + n]
            filled, done = filled + n, done + n
            whole = filled - filled % BLOCK
            if whole:
                _pwrite_all(self._direct, memoryview(buffer)[:whole], offset)
                offset += whole
                buffer[: filled - whole] = buffer[whole:filled]
                filled -= whole
        self._tail = bytes(buffer[:filled])
        if self._tail:
            _pwrite_all(self._fd, memoryview(self._tail), offset)
        self.size = offset + filled

    def _read_tail(self) -> bytes:
        keep = self.size % BLOCK if self.direct else 0
        return os.pread(self._fd, keep, self.size - keep) if keep else b""

    def _stop_direct(self) -> None:
        if self._direct >= 0:
            fd, self._direct = self._direct, -1
            os.close(fd)
        self._tail = b""


def _staging() -> mmap.mmap:
    """This thread's staging buffer: page-aligned, as O_DIRECT wants the memory it reads from."""
    buffer: mmap.mmap | None = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = mmap.mmap(-1, STAGING)
    return buffer


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written
