"""A check of many inputs spread over forked processes (Linux): the preflight's header check of 100,000
inputs takes seconds on one core, ``--dry-run`` decodes every input, and ``--resume`` hashes again every input
already captured.

The inputs are cut into one slice a process. The parent checks the first slice itself while each child
checks one of the others; a child sends back its slice's failures and exits. Its work is bounded, so a child
whose parent died (SIGKILL, the OOM killer) finishes its slice and exits too. Ctrl-C and SIGTERM are the
parent's to handle: it kills the children as it stops. A child that dies is replaced by the parent checking
its slice. The answer is the one a check of each input in order gives."""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..errors import HookdumpError

AT_LEAST = 4096  # inputs a child must have to be worth its fork (a fork of a process holding torch: ~20 ms)

T = TypeVar("T")  # an input: its path, or its record (--resume's hashes of the inputs already captured)
Failure = tuple[int, HookdumpError]  # an input's index, and why its check refused it


def failures(items: Sequence[T], check: Callable[[T], None], first_only: bool) -> list[Failure]:
    """Each input that ``check`` refuses (a HookdumpError), in input order; ``first_only``: the first alone
    (none of the others is checked after it)."""
    count = processes(len(items))
    if count == 1:
        return _checked(items, 0, len(items), check, first_only)
    bounds = [len(items) * k // count for k in range(count + 1)]
    found = _checked(items, 0, 1, check, first_only)  # before any fork: what a check imports (the caller
    # imports the rest: a child importing could wait forever on a lock another thread held at the fork)
    if found and first_only:
        return found
    children: dict[int, int] = {}  # a child's pid: the pipe its failures come through
    owners: list[int | None] = []  # each slice after the first: the pid of the child checking it
    try:
        for k in range(1, count):
            try:
                pid, pipe = _fork(items, bounds[k], bounds[k + 1], check, first_only)
            except OSError:  # no process to be had (a limit on processes, memory): checked here
                owners.append(None)
                continue
            children[pid] = pipe
            owners.append(pid)
        found += _checked(items, 1, bounds[1], check, first_only)
        for k, owner in enumerate(owners, start=1):
            if found and first_only:
                break
            theirs = None if owner is None else _gathered(owner, children.pop(owner))
            if theirs is None:  # no child, or it died: the slice here
                theirs = _checked(items, bounds[k], bounds[k + 1], check, first_only)
            found += theirs
        return found[:1] if first_only else found
    finally:
        for pid, pipe in children.items():  # stopped early (a failure, Ctrl-C): not waited for
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(pipe)


def processes(inputs: int) -> int:
    """How many processes check ``inputs`` inputs: one a core, each with ``AT_LEAST`` of them."""
    if sys.platform != "linux" or inputs < 2 * AT_LEAST:  # (macOS: forking a process with threads is unsafe)
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), inputs // AT_LEAST))


def _checked(
    items: Sequence[T], start: int, stop: int, check: Callable[[T], None], first_only: bool
) -> list[Failure]:
    found: list[Failure] = []
    for index in range(start, stop):
        try:
            check(items[index])
        except HookdumpError as exc:
            found.append((index, exc))
            if first_only:
                break
    return found


def _fork(
    items: Sequence[T], start: int, stop: int, check: Callable[[T], None], first_only: bool
) -> tuple[int, int]:
    """A child checking ``items[start:stop]``: its pid, and the pipe its failures come through."""
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        raise
    if pid:
        os.close(write)
        return pid, read
    code = 1  # the child: never back into the caller's code, whatever happens
    try:
        os.close(read)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        found = _checked(items, start, stop, check, first_only)
        data = pickle.dumps([(i, type(exc), exc.message, exc.hint) for i, exc in found])
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        code = 0
    finally:
        os._exit(code)


def _gathered(pid: int, pipe: int) -> list[Failure] | None:
    """A child's failures, once it exited; None when it died first (its slice is checked again)."""
    try:
        with os.fdopen(pipe, "rb") as source:
            data = source.read()
    except BaseException:  # Ctrl-C while it works
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    if status != 0:
        return None
    return [(i, kind(message, hint)) for i, kind, message, hint in pickle.loads(data)]
