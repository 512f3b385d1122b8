"""Run the console script's entry point in a fresh process without paying for Python's start and torch's
import each time: ``run(args)`` is ``subprocess.run([hookdump, *args], capture_output=True, text=True)``.

A server process per test process imports what the console script imports (``hookdump.cli.app``, the
library, torch, timm) once, never runs a tensor op, and forks a child per run. The child is a process of
its own: it takes the run's environment, working folder and standard streams (files), then calls
``hookdump.cli.app.main`` with the run's argv, as the console script does, and ends as it ends (its exit
code, or the signal that killed it). Importing takes ~4.5 s of CPU per process here and a test run of the
console script ~1 s more, so most of the suite's time went on imports.

Where the run could differ from a fresh interpreter it is one: a real ``subprocess.run`` of the console
script when the run's environment differs from the server's in a variable read when Python, torch or
Hugging Face's libraries start (``HF_*``, ``OMP_*``, ``PYTHON*``, locale, ...), or when the server cannot
start. Tests of the process itself (``--help`` without torch, signals to a process group, torchrun, the
demo script, the process settings) run the console script as it is.
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
import json, os, sys, tempfile
requests, replies = os.fdopen(int(sys.argv[1]), "rb", buffering=0), int(sys.argv[2])
from hookdump.cli import process
process.short_spin()  # before torch, as the console script's main does
import hookdump.api, hookdump.cli.app, hookdump.cli.render, timm, torchvision  # noqa: F401
import hookdump.cli.summaries, hookdump.cli.tree_view  # noqa: F401
spin = os.environ.get("GOMP_SPINCOUNT")
os.write(replies, b"ready\n")
for line in requests:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(replies)
            requests.close()
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
    os.write(replies, (json.dumps({"pid": pid}) + "\n").encode())
    _, status = os.waitpid(pid, 0)
    os.write(replies, (json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n").encode())
"""


class _Server:
    """The forking server of this test process, started on first use."""

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
        self.buffer = b""
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

    def run(self, job: dict[str, Any], timeout: float) -> int:
        os.write(self.requests, (json.dumps(job) + "\n").encode())
        started = self._line(60)
        if started is None:
            raise RuntimeError("the fork server did not fork")
        pid = json.loads(started)["pid"]
        done = self._line(timeout)
        if done is None:
            os.kill(pid, signal.SIGKILL)
            self._line(60)
            raise subprocess.TimeoutExpired([EXE or "hookdump", *job["args"]], timeout)
        return int(json.loads(done)["code"])

    def close(self) -> None:
        os.close(self.requests)
        self.proc.wait(timeout=30)


_server: list[_Server] = []


def _differs_at_start(env: dict[str, str], server: dict[str, str]) -> bool:
    keys = set(env) ^ set(server) | {k for k in env if k in server and env[k] != server[k]}
    return any(k.startswith(AT_START) for k in keys)


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
    argv = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    if not _server:
        try:
            _server.append(_Server())
            atexit.register(_server[0].close)
        except (OSError, RuntimeError):
            pass
    if not _server or _differs_at_start(env, _server[0].env):
        return subprocess.run(
            [EXE, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, input=input
        )
    with tempfile.TemporaryDirectory(prefix="hd-run-") as folder:
        paths = {name: os.path.join(folder, name) for name in ("stdin", "stdout", "stderr")}
        for path in paths.values():
            Path(path).write_text(input if path == paths["stdin"] and input is not None else "")
        job = {"args": argv, "env": env, "cwd": str(cwd or os.getcwd()), **paths}
        code = _server[0].run(job, timeout)
        out, err = (Path(paths[n]).read_text(errors="replace") for n in ("stdout", "stderr"))
    return subprocess.CompletedProcess([EXE, *argv], code, out, err)
