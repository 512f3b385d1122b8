"""glibc's malloc keeps the memory a forward pass frees, for the next one (the console script's process only).

Every block comes from the heap (``M_MMAP_MAX`` 0) and freed memory is not given back to the system
(``M_TRIM_THRESHOLD`` 2 GiB). By default each large tensor (an activation, a copy) is a fresh ``mmap`` whose
pages the kernel faults in and zeroes, batch after batch; kept, they are reused as they are. resnet50 over
256 photos on 2 cores: the bare forward takes 45% less wall time, hookdump 20-30% less; peak memory is about
a fifth higher (the high-water mark stays taken). The results are the same, bit for bit. Skipped where the
C library is not glibc, and when the user set malloc's own variables (``MALLOC_MMAP_MAX_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``GLIBC_TUNABLES``). The
library never calls this: a user's own process keeps its allocator as it is.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt's parameters, from glibc's malloc.h
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: the largest
USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve blocks from the heap and keep what is freed; whether it did."""
    if any(name in os.environ for name in (*USER_SETTINGS, "GLIBC_TUNABLES")) or not _glibc():
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # not a POSIX system, or no such name here
        return False
