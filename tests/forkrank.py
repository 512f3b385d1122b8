"""One of torchrun's ranks, forked from the test process's server (:mod:`forkrun`): ``torchrun --no-python
... python forkrank.py ARGS`` runs this small script (no torch imported) as each rank. It hands the server
ARGS, its environment, its folder and its own standard streams (torchrun's pipes or log files), and the
server forks ``hookdump ARGS`` into a session of its own. A signal torchrun sends this rank's process group
goes on to that session, decoding workers included, as it would reach them in a rank of their own; this
script then ends as the run ended (its exit code, or the signal that killed it)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from forkrun import ADDRESS_VAR, Job


def _pass_on(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the run ended already
        os.killpg(pid, sig)


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k != ADDRESS_VAR}
    job = {"args": sys.argv[1:], "env": env, "cwd": os.getcwd(), "session": True}
    passed_on = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
    signal.pthread_sigmask(signal.SIG_BLOCK, passed_on)  # held until the run's pid is known
    run = Job(os.environ[ADDRESS_VAR], job, [0, 1, 2])
    for sig in passed_on:
        signal.signal(sig, lambda sig, _: _pass_on(run.pid, sig))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, passed_on)
    code = run.code(None)
    assert code is not None
    if code < 0:  # killed by a signal: so is this rank
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
