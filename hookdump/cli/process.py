"""What the console script does to its own process (never the library: a user's process keeps its settings):
malloc keeps freed memory, OpenMP spins less, closed standard streams read as /dev/null, and the exit skips
the interpreter's teardown. ``hookdump.cli.app.main`` calls each; every result stays the same, bit for bit.

**malloc** (``keep_freed_memory``, ``trimmed``): glibc's malloc keeps the memory a forward pass frees for the
rest of its batch and gives it back after the batch. Every block comes from the heap (``M_MMAP_MAX`` 0) and
freed memory is not given back to the system as it is freed (``M_TRIM_THRESHOLD`` 2 GiB). By default each
large tensor (an activation, a copy) is a fresh ``mmap`` whose pages the kernel faults in and zeroes; kept,
the blocks a forward pass frees are reused as they are by its later layers. Kept for good, though, the heap
fragments (small blocks that live on land in the holes a batch's tensors left) and the peak grows with the
number of images: efficientnet_lite0 ``conv_stem``, 512 photos 0.95 GB, 2,048 photos 1.8-2.3 GB. So after each
batch reached the disk ``trimmed`` calls ``malloc_trim(0)``, which gives every free page back: the peak is
flat in the number of images, and each batch faults its pages in again (resnet50 over 256 photos: CPU time
1.06x keeping everything, 0.66x glibc's defaults; docs/performance.md). The results are the same, bit for bit.
Skipped where the C library is not glibc, and when the user set malloc's own variables (``MALLOC_MMAP_MAX_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``GLIBC_TUNABLES``).

**OpenMP** (``short_spin``): idle threads spin less, so the writer thread gets the core. torch's CPU kernels
run on GNU OpenMP (libgomp). Between two parallel regions its idle threads busy-wait 300,000 turns before they
sleep: on a machine whose cores all run the forward, that spinning takes the core from hookdump's writer
thread (the file writes and the stats), and the forward then waits for the writer. ``GOMP_SPINCOUNT=10000``
lets them sleep sooner. resnet50 over 256 photos on 2 cores: hookdump 13% less wall time (14.4 s to 12.5 s,
medians of 3), the bare forward unchanged; one photo unchanged. The results are the same, bit for bit (it
changes when a thread sleeps, not what it computes). libgomp reads the variable when torch loads it, so this
must run before ``import torch``. Skipped when the user set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
from collections.abc import Callable
from typing import NoReturn

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt's parameters, from glibc's malloc.h
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: the largest
MALLOC_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
_kept: list[Callable[[int], int]] = []  # malloc_trim, once keep_freed_memory took effect


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve blocks from the heap and keep what is freed; whether it did."""
    if any(name in os.environ for name in (*MALLOC_SETTINGS, "GLIBC_TUNABLES")) or not _glibc():
        return False
    libc = ctypes.CDLL(None)
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    if libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        _kept[:] = [libc.malloc_trim]
        return True
    return False


def trimmed(on_batch: Callable[[int, int, int], None]) -> Callable[[int, int, int], None]:
    """``on_batch`` (``api.capture``'s, called once a batch reached the disk), then the free memory given
    back to the system, when ``keep_freed_memory`` took effect in this process."""

    def then_trim(done: int, total: int, written: int) -> None:
        on_batch(done, total, written)
        give_back()

    return then_trim


def give_back() -> None:
    """``malloc_trim(0)``: every free page back to the system, when ``keep_freed_memory`` took effect."""
    for malloc_trim in _kept:
        malloc_trim(0)


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # not a POSIX system, or no such name here
        return False


SPIN_COUNT = "10000"
OPENMP_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def short_spin() -> bool:
    """Set ``GOMP_SPINCOUNT`` for this process (and the processes it starts); whether it did."""
    if "torch" in sys.modules or any(name in os.environ for name in OPENMP_SETTINGS):
        return False  # too late (libgomp has read its settings), or the user's own choice
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True


def reopen_closed_streams() -> None:
    """A standard stream closed by the caller (``>&-``, ``2>&-``, ``<&-``) reads as ``/dev/null``: what
    would go there is dropped and the command runs as usual (its exit code unchanged). Left closed, the
    descriptor would be the next file hookdump opens, and whatever writes to fd 1 or 2 would land in it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            stream = open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)  # the process's own stream, open to its end


def exit_now(code: int | str | None) -> NoReturn:
    """End the console script with ``code`` once everything is written (stdout and stderr flushed, the
    ``atexit`` work done: worker processes joined, temporary folders removed) but without the interpreter's
    teardown of every module, which takes about a second once torch and timm are loaded (1.0 s of a 4 s
    one-photo capture on this project's 2-core machine). Only for the console script: in a process that
    goes on (tests, a notebook) nothing calls this."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    code = code or 0
    run_exit_functions = getattr(atexit, "_run_exitfuncs", None)
    if "torch" not in sys.modules or run_exit_functions is None:
        sys.exit(code)  # nothing slow to skip
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (| head) or a closed stream
            stream.flush()
    run_exit_functions()
    os._exit(code)
