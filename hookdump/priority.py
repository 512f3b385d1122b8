"""The work behind the forward pass (the writer thread, the decoding workers) at a lower CPU priority.

On a machine whose cores all run the forward pass, a third runnable thread takes a core from one of the
forward's OpenMP threads, and each parallel region then waits for the thread that lost its core. A few
points of ``nice`` (Linux: each thread has its own) let the scheduler give the writer and the decoders
the gaps between the forward's regions instead, and the whole core when the forward waits for them. What
they compute and write is the same, bit for bit. Where a thread has no priority of its own (not Linux),
nothing changes. No torch import.
"""

from __future__ import annotations

import os
import sys
import threading

STEP = 5  # nice +5: about a third of a core's share against a thread at the default 0


def lower_this_thread(step: int = STEP) -> bool:
    """Raise the calling thread's ``nice`` by ``step`` (at most 19); whether it did."""
    if sys.platform != "linux" or not hasattr(os, "setpriority"):
        return False  # elsewhere PRIO_PROCESS with a thread id would be the whole process, or nothing
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + step))
    except OSError:
        return False
    return True
