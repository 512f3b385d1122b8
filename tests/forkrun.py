"""Run the console script's entry point in a fresh process without paying for Python's start and torch's
import each time: ``run(args)`` is ``subprocess.run([hookdump, *args], capture_output=True, text=True)``,
``start(args)`` is ``subprocess.Popen([hookdump, *args], stdout=PIPE, stderr=PIPE, text=True,
start_new_session=True)``.

A server process per test process imports what the console script imports (``hookdump.cli.app``, the
library, torch, timm) once, never runs a tensor op, and forks a child per run, as many at once as asked. The
child is a process of its own: it takes the run's environment, working folder and standard streams (files),
a session of its own for ``start`` (so that a signal to its process group reaches its decoding workers, as
from a terminal or a scheduler), then calls ``hookdump.cli.app.main`` with the run's argv, as the console
script does, and ends as it ends (its exit code, or the signal that killed it). Importing takes ~4.5 s of CPU
per process here and a test run of the console script ~1 s more, so most of the suite's time went on imports.

Where the run could differ from a fresh interpreter it is one: a real ``subprocess`` run of the console
script when the run's environment differs from the server's in a variable read when Python, torch or
Hugging Face's libraries start (``HF_*``, ``OMP_*``, ``PYTHON*``, locale, ...), or when the server cannot
start. Tests of the process itself (``--help`` without torch, the process settings, torchrun, the demo
script) run the console script as it is.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

EXE = shutil.which("hookdump", path=str(Path(sys.executable).parent))
#: Variables read when the interpreter or a library starts (or that the server set up): a run that changes
#: one gets a fresh interpreter.
AT_START = (
    "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH", "TIMM_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_",
    "MALLOC_", "GLIBC_", "LD_", "PYTHON", "LANG", "LC_", "CUDA_", "XDG_", "HOME",
)  # fmt: skip

SERVER = r"""
import json, os, select, signal, sys, tempfile
requests, replies = int(sys.argv[1]), int(sys.argv[2])
from hookdump.cli import process
process.short_spin()  # before torch, as the console script's main does
import hookdump.api, hookdump.cli.app, hookdump.cli.render, timm, torchvision  # noqa: F401
import hookdump.cli.summaries, hookdump.cli.tree_view  # noqa: F401
spin = os.environ.get("GOMP_SPINCOUNT")
wake, woken = os.pipe()  # SIGCHLD writes a byte here: a child ended
os.set_blocking(woken, False)
signal.signal(signal.SIGCHLD, lambda *_: None)
signal.set_wakeup_fd(woken)


def child(job):
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (requests, replies, wake, woken):
            os.close(fd)
        if job["session"]:
            os.setsid()
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        if spin is not None and not any(k in os.environ for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")):
            os.environ["GOMP_SPINCOUNT"] = spin
        tempfile.tempdir = None
        for fd, path, mode in ((0, job["stdin"], os.O_RDONLY), (1, job["stdout"], os.O_WRONLY),
                               (2, job["stderr"], os.O_WRONLY)):
            opened = os.open(path, mode)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = ["hookdump", *job["args"]]
        from hookdump.cli.app import main
        main()
    finally:
        os._exit(1)


def reply(**fields):
    os.write(replies, (json.dumps(fields) + "\n").encode())


os.write(replies, b"ready\n")
running, pending = {}, b""
while True:
    ready, _, _ = select.select([requests, wake], [], [])
    if wake in ready:
        os.read(wake, 4096)
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        reply(id=running.pop(pid), code=os.waitstatus_to_exitcode(status))
    if requests in ready:
        chunk = os.read(requests, 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            job = json.loads(line)
            pid = os.fork()
            if pid == 0:
                child(job)
            running[pid] = job["id"]
            reply(id=job["id"], pid=pid)
"""


class _Server:
    """The forking server of this test process, started on first use; it runs any number of jobs at once."""

    def __init__(self) -> None:
        requests_r, self.requests = os.pipe()
        self.replies, replies_w = os.pipe()
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(requests_r), str(replies_w)],
            pass_fds=(requests_r, replies_w), stdin=subprocess.DEVNULL, env=self.env,
        )  # fmt: skip
        os.close(requests_r)
        os.close(replies_w)
        self.buffer, self.jobs, self.lock = b"", 0, threading.Lock()
        self.pids: dict[int, int] = {}
        self.codes: dict[int, int] = {}
        if self._line(120) != b"ready":
            raise RuntimeError("the fork server did not start")

    def _line(self, timeout: float | None) -> bytes | None:
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.replies], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self.replies, 65536)
            if not chunk:
                raise RuntimeError("the fork server ended")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def _until(self, found: Any, timeout: float | None) -> None:
        """Read replies until ``found()`` is true or ``timeout`` seconds passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while not found():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                line = self._line(left)
                if line is None:
                    return
                reply = json.loads(line)
                (self.pids if "pid" in reply else self.codes)[reply["id"]] = reply.get(
                    "pid", reply.get("code")
                )

    def start(self, job: dict[str, Any]) -> tuple[int, int]:
        """The job forked: its id and pid."""
        with self.lock:
            self.jobs += 1
            job_id = self.jobs
            os.write(self.requests, (json.dumps({**job, "id": job_id}) + "\n").encode())
        self._until(lambda: job_id in self.pids, 60)
        if job_id not in self.pids:
            raise RuntimeError("the fork server did not fork")
        return job_id, self.pids.pop(job_id)

    def code(self, job_id: int, timeout: float | None) -> int | None:
        """The job's exit code (negative: the signal that ended it), or None if it still runs."""
        self._until(lambda: job_id in self.codes, timeout)
        return self.codes.pop(job_id, None)

    def close(self) -> None:
        os.close(self.requests)
        self.proc.wait(timeout=30)


class Forked:
    """What ``subprocess.Popen([hookdump, *args], stdout=PIPE, stderr=PIPE, text=True)`` gives, for a run
    forked from the server: ``pid``, ``returncode``, ``poll``, ``wait``, ``communicate`` (the streams are
    files, read once it ended), ``send_signal``, ``terminate``, ``kill``."""

    def __init__(self, server: _Server, args: list[str], job: dict[str, Any], folder: str) -> None:
        self.args, self._server, self._folder, self._job = [EXE, *args], server, folder, job
        self._id, self.pid = server.start(job)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._wait(0)

    def _wait(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.code(self._id, timeout)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out, err = (Path(self._job[n]).read_text(errors="replace") for n in ("stdout", "stderr"))
        shutil.rmtree(self._folder, ignore_errors=True)
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_server: list[_Server] = []


def _differs_at_start(env: dict[str, str], server: dict[str, str]) -> bool:
    keys = set(env) ^ set(server) | {k for k in env if k in server and env[k] != server[k]}
    return any(k.startswith(AT_START) for k in keys)


def _server_for(env: dict[str, str]) -> _Server | None:
    """This test process's server (started on first use), or None where the run needs a fresh interpreter."""
    if not _server:
        try:
            _server.append(_Server())
            atexit.register(_server[0].close)
        except (OSError, RuntimeError):
            return None
    return None if _differs_at_start(env, _server[0].env) else _server[0]


def _fork(server: _Server, argv: list[str], env: dict[str, str], cwd: Path | str | None, input: str | None,
          session: bool) -> Forked:  # fmt: skip
    folder = tempfile.mkdtemp(prefix="hd-run-")
    paths = {name: os.path.join(folder, name) for name in ("stdin", "stdout", "stderr")}
    for path in paths.values():
        Path(path).write_text(input if path == paths["stdin"] and input is not None else "")
    job = {"args": argv, "env": env, "cwd": str(cwd or os.getcwd()), "session": session, **paths}
    return Forked(server, argv, job, folder)


def start(
    args: list[Any] | tuple[Any, ...], *, env: dict[str, str] | None = None, cwd: Path | str | None = None
) -> Forked | subprocess.Popen[str]:
    """``subprocess.Popen([hookdump, *args], stdout=PIPE, stderr=PIPE, text=True, start_new_session=True)``,
    forked from the server: its decoding workers share its process group, so ``os.killpg(proc.pid, sig)``
    reaches them as a terminal's Ctrl-C or a scheduler's SIGTERM does."""
    assert EXE is not None
    argv, env = [str(a) for a in args], dict(os.environ if env is None else env)
    server = _server_for(env)
    if server is None:
        return subprocess.Popen(
            [EXE, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=cwd, start_new_session=True,
        )  # fmt: skip
    return _fork(server, argv, env, cwd, None, session=True)


def run(
    args: list[Any] | tuple[Any, ...],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 600,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([hookdump, *args], capture_output=True, text=True, ...)``, forked from the server."""
    assert EXE is not None
    argv, env = [str(a) for a in args], dict(os.environ if env is None else env)
    server = _server_for(env)
    if server is None:
        return subprocess.run(
            [EXE, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, input=input
        )
    proc = _fork(server, argv, env, cwd, input, session=False)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.wait(), out, err)
