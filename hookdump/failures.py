"""Failures of the machine rather than of hookdump (a full disk, a path it may not touch, memory that ran
out) as the user-facing errors they are, with the fix."""

from __future__ import annotations

import errno
import os
import re

from .errors import HookdumpError, InputError
from .units import human_bytes

#: The errno values of a disk with no room left (or a quota used up).
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(where: str, kept: str = "", needed: int | None = None) -> InputError:
    """The disk filled up while writing ``where``; ``kept`` says what of the run remains, ``needed`` how many
    bytes the whole write takes (when known)."""
    size = f"; it needs about {human_bytes(needed)} in all" if needed else ""
    return InputError(
        f"The disk is full: writing {where} failed ({os.strerror(errno.ENOSPC)}){size}. {kept}".rstrip(),
        "Free some space, or write to another disk (`hookdump capture --dry-run` says how much a capture"
        " writes).",
    )


def from_environment(exc: BaseException) -> HookdumpError | None:
    """The user-facing error for a failure of the machine rather than of hookdump: a full disk, a path it
    may not read or write, memory that ran out. None for anything else (a bug)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f" `{exc.filename}`" if exc.filename else ""
        text = f"{exc.strerror or exc}{':' if where else ''}{where}."
        if exc.errno in DISK_FULL:
            return disk_full(f"`{exc.filename}`" if exc.filename else "a file")
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return InputError(text, "Check the permissions of that path, or use another one.")
        if exc.errno == errno.ENAMETOOLONG:
            return InputError(text, "Use a shorter path.")
        return None
    if type(exc).__name__ == "OutOfMemoryError" or "can't allocate memory" in str(exc):
        tried = re.search(r"tried to allocate (\d+) bytes", str(exc))
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        what = f"{human_bytes(int(tried[1]))} more were asked for at once" if tried else lines[0]
        return InputError(
            f"Out of memory: {what}.",
            "Use a smaller --batch-size or --input-size, fewer layers, or a machine (or GPU) with more"
            " memory.",
        )
    return None
