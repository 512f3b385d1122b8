"""Where a capture's time goes: seconds added up by name in the code path (``time.perf_counter``, a few
microseconds a batch), written as JSON to the file ``HOOKDUMP_PROFILE`` names when the run ends; nothing is
written without it. ``scripts/bench/dataset.py`` prints them as the breakdown of hookdump's rows.

On the main thread: ``setup`` (plan, model load, before the first batch; of which ``resume check``, the
inputs already captured hashed again), ``decode`` (waiting for the next batch from the decoding workers),
``forward`` (the model's own work: its calls less the time in hookdump's hooks), ``hooks`` (of which
``copy`` and ``reduce``), ``writer wait`` (waiting for the writer thread to take a batch), ``between
batches`` (the rest of the loop: Python between the batches), ``writer drain`` (after the last batch, until
the writer is done) and ``commit`` (the files moved, the manifest). On the writer thread, overlapping the
forward: ``landing`` (waiting for a batch's copies from CUDA to reach the host), ``stats``, ``write``
(the streams' appends), ``checkpoint`` (fsyncs, progress.json) and
``on_batch`` (the caller's: the progress line, and the console script's ``malloc_trim``). ``records`` is
the inputs' records' own cost, wherever it falls: journaled and added to ``inputs.parquet`` at each
checkpoint (part of ``checkpoint``), gathered after the last batch, the table finished (part of
``commit``); ``records cpu`` and ``resume check cpu`` are the CPU time of those spans (without the waits
for the disk). ``run`` is the whole of ``capture.run``; ``before run`` the process's life before
it (interpreter start, imports, parsing; Linux only, to 10 ms)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from . import claims

ENV = "HOOKDUMP_PROFILE"
clock = time.perf_counter
seconds: dict[str, float] = {}
_lock = threading.Lock()


def add(name: str, since: float) -> float:
    """Add the seconds from ``since`` to now to ``name``; now (the next span's start)."""
    now = clock()
    with _lock:
        seconds[name] = seconds.get(name, 0.0) + now - since
    return now


@contextlib.contextmanager
def span(name: str, forks: bool = False) -> Iterator[None]:
    """Time the block under ``name``, and the CPU time this thread spent in it under ``name cpu`` (which
    leaves out waiting: for the disk in an fsync, for another thread holding the interpreter); ``forks``:
    with the CPU time of the child processes the block forked and waited for (``inputs/forks.py``). Only on
    the main thread: nothing else may reap a child meanwhile (a decoding worker's seconds would count)."""
    start, cpu = clock(), _cpu(forks)
    try:
        yield
    finally:
        add(name, start)
        with _lock:
            seconds[f"{name} cpu"] = seconds.get(f"{name} cpu", 0.0) + _cpu(forks) - cpu


def _cpu(forks: bool) -> float:
    """This thread's CPU time, with that of every child process waited for when ``forks``."""
    if not forks:
        return time.thread_time()
    children = os.times()
    return time.thread_time() + children.children_user + children.children_system


def reset() -> None:
    with _lock:
        seconds.clear()


ELSEWHERE = "point HOOKDUMP_PROFILE elsewhere"


def check_target() -> None:
    """Before any work: the file ``HOOKDUMP_PROFILE`` names is no user's (a file hookdump wrote, or none)."""
    target = os.environ.get(ENV)
    if target:
        claims.claim(Path(target).parent, [Path(target).name], "capture", ENV, ELSEWHERE)


def dump(extra: dict[str, float] | None = None) -> None:
    """Write the seconds (and ``extra``) to the file ``HOOKDUMP_PROFILE`` names, if it names one."""
    target = os.environ.get(ENV)
    if target:
        with _lock:
            data = {**seconds, **(extra or {})}
        age = process_age()
        if age is not None and "run" in data:
            data["before run"] = max(0.0, age - data["run"])
        if "model" in data:
            data["forward"] = data.pop("model") - data.get("hooks", 0.0)
            inside = ("decode", "forward", "hooks", "writer wait")
            data["between batches"] = data.pop("loop", 0.0) - sum(data.get(k, 0.0) for k in inside)
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        path = Path(target)  # a file of the user's of that name is refused, as every writer's is
        with claims.claim(path.parent, [path.name], "capture", ENV, ELSEWHERE) as w:
            w.stage(path.name, lambda tmp: tmp.write_text(text))
            w.commit()


def process_age() -> float | None:
    """Seconds since this process started (``/proc``: Linux, to a clock tick); None where unknown."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the command's name
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
