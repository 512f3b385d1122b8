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

torchrun's ranks come from the server too (:func:`torchrun`): torchrun itself runs as it is and starts
``forkrank.py`` as each rank, a small script that hands its arguments, environment and standard streams to
the server over its socket, passes on the signals torchrun sends it, and ends as its run ended. A rank's
``OMP_NUM_THREADS`` (torchrun sets 1) is applied with ``torch.set_num_threads``, as libgomp would read it.

Where the run could differ from a fresh interpreter it is one: a real ``subprocess`` run of the console
script when the run's environment differs from the server's in a variable read when Python, torch or
Hugging Face's libraries start (``HF_*``, ``OMP_*``, ``PYTHON*``, locale, ...), or when the server cannot
start. Tests of the process itself (``--help`` without torch, the process settings, the demo script, one
torchrun run end to end) run the console script as it is.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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

#: The variable that tells torchrun's ranks (:data:`RANK`) where the server listens.
ADDRESS_VAR = "HOOKDUMP_TEST_FORK_SERVER"
#: torchrun's rank, forked from the server: ``torchrun --no-python ... *RANK capture ...`` (:func:`torchrun`).
RANK = (sys.executable, str(Path(__file__).with_name("forkrank.py")))

SERVER = r"""
import json, os, select, signal, socket, sys, tempfile
alive, ready, address = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
from hookdump.cli import process
process.short_spin()  # before torch, as the console script's main does
import hookdump.api, hookdump.cli.app, hookdump.cli.render, timm, torch, torchvision  # noqa: F401
import hookdump.cli.summaries, hookdump.cli.tree_view  # noqa: F401
spin, threads = os.environ.get("GOMP_SPINCOUNT"), torch.get_num_threads()
wake, woken = os.pipe()  # SIGCHLD writes a byte here: a child ended
os.set_blocking(woken, False)
signal.signal(signal.SIGCHLD, lambda *_: None)
signal.set_wakeup_fd(woken)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(address)
listener.listen(64)
running = {}  # pid: the connection its job came on


def child(job, fds, conn, started):
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for sock in (listener, conn, *running.values()):
            sock.close()
        for fd in (alive, ready, wake, woken):
            os.close(fd)
        if job["session"]:
            os.setsid()
        os.close(started)  # the server answers with the pid once the session is there
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        if spin is not None and not any(k in os.environ for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")):
            os.environ["GOMP_SPINCOUNT"] = spin
        if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) != threads:
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # torchrun's ranks: what libgomp reads
        tempfile.tempdir = None
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.argv = ["hookdump", *job["args"]]
        from hookdump.cli.app import main
        main()
    finally:
        os._exit(1)


def job_of(conn):
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        data += conn.recv(1 << 20)
    return json.loads(data), fds


os.write(ready, b"ready\n")
while True:
    readable, _, _ = select.select([alive, wake, listener], [], [])
    if alive in readable:  # the test process ended
        break
    if wake in readable:
        os.read(wake, 4096)
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        conn = running.pop(pid)
        conn.sendall((json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n").encode())
        conn.close()
    if listener in readable:
        conn, _ = listener.accept()
        job, fds = job_of(conn)
        waiting, started = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(waiting)
            child(job, fds, conn, started)
        os.close(started)
        os.read(waiting, 1)  # end of file: the child is in its own session (or ended)
        os.close(waiting)
        for fd in fds:
            os.close(fd)
        running[pid] = conn
        conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
"""


class _Server:
    """The forking server of this test process, started on first use: it forks a child for each connection
    to its socket (``address``), any number at once."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="hd-fork-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self.address = os.path.join(self.folder, "socket")  # short: AF_UNIX paths hold 107 bytes
        alive_r, self.alive = os.pipe()
        ready_r, ready_w = os.pipe()
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(alive_r), str(ready_w), self.address],
            pass_fds=(alive_r, ready_w), stdin=subprocess.DEVNULL, env=self.env,
        )  # fmt: skip
        os.close(alive_r)
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            if not select.select([ready], [], [], 120)[0] or ready.readline() != b"ready\n":
                raise RuntimeError("the fork server did not start")

    def close(self) -> None:
        os.close(self.alive)
        self.proc.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


class Job:
    """A run the server forked (``job``: ``args``, ``env``, ``cwd``, ``session``; ``fds``: its standard
    streams): its ``pid``, and the connection its exit code comes on."""

    def __init__(self, address: str, job: dict[str, Any], fds: list[int]) -> None:
        self._conn, self._buffer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), b""
        self._conn.connect(address)
        socket.send_fds(self._conn, [(json.dumps(job) + "\n").encode()], fds)
        forked = self._reply(60)
        if forked is None:
            raise RuntimeError("the fork server did not fork")
        self.pid = int(forked["pid"])

    def _reply(self, timeout: float | None) -> dict[str, int] | None:
        """The server's next line, or None if none came in ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError("the fork server ended")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return dict(json.loads(line))

    def code(self, timeout: float | None) -> int | None:
        """The exit code (negative: the signal that ended it), or None if it runs on after ``timeout``."""
        ended = self._reply(timeout)
        if ended is None:
            return None
        self._conn.close()
        return int(ended["code"])


#: How a forked run's standard streams (files) are opened: stdin to read, stdout and stderr to write.
STREAM_FLAGS = (os.O_RDONLY, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_TRUNC)


class Forked:
    """What ``subprocess.Popen([hookdump, *args], stdout=PIPE, stderr=PIPE, text=True)`` gives, for a run
    forked from the server: ``pid``, ``returncode``, ``poll``, ``wait``, ``communicate`` (the streams are
    files, read, and removed, once it ended), ``send_signal``, ``terminate``, ``kill``."""

    def __init__(
        self, server: _Server, argv: list[str], env: dict[str, str], cwd: Path | str | None, *,
        session: bool, input: str | None = None,
    ) -> None:  # fmt: skip
        job = {"args": argv, "env": env, "cwd": str(cwd or os.getcwd()), "session": session}
        self.args, self.returncode = [EXE, *argv], None
        self._streams: list[str] = []  # stdout and stderr, once it ended
        self._folder = tempfile.mkdtemp(prefix="hd-run-")
        self._paths = [os.path.join(self._folder, name) for name in ("stdin", "stdout", "stderr")]
        Path(self._paths[0]).write_text(input or "")
        fds = [
            os.open(path, flags | os.O_CREAT, 0o600)
            for path, flags in zip(self._paths, STREAM_FLAGS, strict=True)
        ]
        try:
            self._job = Job(server.address, job, fds)
            self.pid = self._job.pid
        finally:
            for fd in fds:
                os.close(fd)

    def poll(self) -> int | None:
        return self._wait(0)

    def _wait(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self.returncode = self._job.code(timeout)
            if self.returncode is not None:
                self._streams = [Path(path).read_text(errors="replace") for path in self._paths[1:]]
                shutil.rmtree(self._folder, ignore_errors=True)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._streams[0], self._streams[1]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


#: What :func:`start` gives: a forked run, or the fresh interpreter's Popen (their calls are the same).
Started = Forked | subprocess.Popen[str]
_server: list[_Server | None] = []  # None: it could not start (tried once)


def _differs_at_start(env: dict[str, str], server: dict[str, str]) -> bool:
    keys = set(env) ^ set(server) | {k for k in env if k in server and env[k] != server[k]}
    return any(k.startswith(AT_START) for k in keys)


def _server_for(env: dict[str, str]) -> _Server | None:
    """This test process's server (started on first use), or None where the run needs a fresh interpreter."""
    if not _server:
        try:
            _server.append(_Server())
        except (OSError, RuntimeError):
            _server.append(None)
        else:
            atexit.register(_server[0].close)
    server = _server[0]
    return None if server is None or _differs_at_start(env, server.env) else server


def _prepared(
    args: list[Any] | tuple[Any, ...], env: dict[str, str] | None
) -> tuple[list[str], dict[str, str]]:
    """The run's argv (strings) and its whole environment (this one's unless given)."""
    assert EXE is not None
    return [str(a) for a in args], dict(os.environ if env is None else env)


def start(
    args: list[Any] | tuple[Any, ...], *, env: dict[str, str] | None = None, cwd: Path | str | None = None
) -> Started:
    """``subprocess.Popen([hookdump, *args], stdout=PIPE, stderr=PIPE, text=True, start_new_session=True)``,
    forked from the server: its decoding workers share its process group, so ``os.killpg(proc.pid, sig)``
    reaches them as a terminal's Ctrl-C or a scheduler's SIGTERM does."""
    argv, env = _prepared(args, env)
    server = _server_for(env)
    if server is None:
        return subprocess.Popen(
            [EXE, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=cwd, start_new_session=True,
        )  # fmt: skip
    return Forked(server, argv, env, cwd, session=True)


def run(
    args: list[Any] | tuple[Any, ...],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 600,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([hookdump, *args], capture_output=True, text=True, ...)``, forked from the server."""
    argv, env = _prepared(args, env)
    server = _server_for(env)
    if server is None:
        return subprocess.run(
            [EXE, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, input=input
        )
    proc = Forked(server, argv, env, cwd, session=False, input=input)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.wait(), out, err)


def torchrun(
    args: list[Any] | tuple[Any, ...], *, env: dict[str, str], ranks: int = 2, forked: bool = True
) -> tuple[list[str], dict[str, str]]:
    """``torchrun --nproc-per-node RANKS -m hookdump ARGS`` and its environment ``env``, each rank forked from
    the server through ``forkrank.py`` (``forked=False``, or where :func:`run` would start a fresh
    interpreter: each rank a fresh ``python -m hookdump``)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks)]
    server = _server_for(env) if forked else None
    if server is None:
        return [*launcher, "-m", "hookdump", *map(str, args)], env
    return [*launcher, "--no-python", *RANK, *map(str, args)], {**env, ADDRESS_VAR: server.address}
