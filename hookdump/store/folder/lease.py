"""The lease object that stands for a capture folder's lock on object storage (``OUT/.hookdump-lease.json``):
who writes the folder now (host, process) and until when; taken with a conditional put, renewed on a
thread while the run holds it, released at its end; free once expired, or once its holder, on this host,
is gone (a ``kill -9``: ``--resume`` takes it at once)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

from ...errors import UsageError
from ...urls import call, filesystem, join

LEASE = ".hookdump-lease.json"  # in the bucket: who writes this prefix now, until when
TTL_S = 600  # a lease not renewed for this long is free to take


def read_object(fs: Any, url: str, target: str, role: str = "out") -> bytes | None:
    """An object's bytes, or None when there is none (read, not looked up: listings are cached)."""

    def work() -> bytes | None:
        try:
            data: bytes = fs.cat_file(target)
        except FileNotFoundError:
            return None
        return data

    return call(url, work, role, "read")


class Lease:
    """The lease object that stands for a folder's lock on object storage: its holder (host and process),
    renewed while the run holds it, free once released, expired, or its holder on this host gone."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs, path = filesystem(url, "out")
        self.path = join(path, LEASE)
        self.me = {"host": socket.gethostname(), "pid": os.getpid()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> dict[str, Any] | None:
        text = read_object(self.fs, self.url, self.path)
        try:
            data = json.loads(text) if text is not None else None
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def _free(self, held: dict[str, Any] | None) -> bool:
        if held is None or float(held.get("expires", 0)) < time.time():
            return True
        same_host = held.get("host") == self.me["host"]
        return same_host and (held.get("pid") == self.me["pid"] or not _alive(int(held.get("pid", 0))))

    def check(self) -> None:
        """Refuse while another run holds the lease (nothing is taken)."""
        held = self._read()
        if not self._free(held):
            assert held is not None
            until = time.strftime("%H:%M:%S", time.localtime(float(held["expires"])))
            raise UsageError(
                f"`{self.url}` is being written by another hookdump run (process {held.get('pid')} on"
                f" {held.get('host')}, its lease `{LEASE}` held until {until} unless renewed).",
                "Wait for it to finish, or choose another --out.",
            )

    def __enter__(self) -> Lease:
        self.check()
        self._write(create=self._read() is None)
        self._thread = threading.Thread(target=self._renew, name="hookdump-lease", daemon=True)
        self._thread.start()
        return self

    def _write(self, create: bool) -> None:
        body = json.dumps({**self.me, "taken": time.time(), "expires": time.time() + TTL_S}).encode()
        mode = "create" if create else "overwrite"
        try:
            call(self.url, lambda: self.fs.pipe_file(self.path, body, mode=mode), "out", "write")
        except UsageError as exc:  # another run created it between the check and the put
            if "FileExistsError" in exc.message:
                self.check()
            raise

    def _renew(self) -> None:
        while not self._stop.wait(TTL_S / 10):
            try:
                self._write(create=False)
            except Exception:  # the publish checks the lease again; a run keeps going without the network
                continue

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            held = self._read()
            if held is not None and held.get("host") == self.me["host"] and held.get("pid") == self.me["pid"]:
                call(self.url, lambda: self.fs.rm_file(self.path), "out", "write")
        except Exception:  # a lease left behind expires, or its dead holder's host takes it
            if exc[1] is None:
                raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0
