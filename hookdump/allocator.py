"""glibc's malloc keeps the memory a forward pass frees for the rest of its batch and gives it back after
the batch (the console script's process only).

Every block comes from the heap (``M_MMAP_MAX`` 0) and freed memory is not given back to the system as it is
freed (``M_TRIM_THRESHOLD`` 2 GiB). By default each large tensor (an activation, a copy) is a fresh ``mmap``
whose pages the kernel faults in and zeroes; kept, the blocks a forward pass frees are reused as they are by
its later layers. Kept for good, though, the heap fragments (small blocks that live on land in the holes a
batch's tensors left) and the peak grows with the number of images: efficientnet_lite0 ``conv_stem``, 512
photos 0.95 GB, 2,048 photos 1.8-2.3 GB. So after each batch reached the disk ``trimmed`` calls
``malloc_trim(0)``, which gives every free page back: the peak is flat in the number of images, and each
batch faults its pages in again (resnet50 over 256 photos: CPU time 1.06x keeping everything, 0.66x
glibc's defaults; README, Performance). The results are the same, bit for bit.
Skipped where the C library is not glibc, and when the user set malloc's own variables
(``MALLOC_MMAP_MAX_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``GLIBC_TUNABLES``). The library never calls this: a user's own process keeps its allocator as it is.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt's parameters, from glibc's malloc.h
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: the largest
USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
_kept: list[Callable[[int], int]] = []  # malloc_trim, once keep_freed_memory took effect


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve blocks from the heap and keep what is freed; whether it did."""
    if any(name in os.environ for name in (*USER_SETTINGS, "GLIBC_TUNABLES")) or not _glibc():
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
