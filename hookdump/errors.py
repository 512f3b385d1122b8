"""One error type for everything a user can get wrong, each kind with its exit code and a fix."""

from __future__ import annotations

import errno
import os
import re

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_LAYER = 3
EXIT_INPUT = 4


class HookdumpError(Exception):
    """A user-facing error: a short message naming the problem plus a hint with the fix."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def paragraph(self) -> str:
        """The whole text shown to the user: message, then the fix."""
        return f"{self.message}\n{self.hint}" if self.hint else self.message


class UsageError(HookdumpError):
    """Options that contradict each other, an output folder in the way, a device that is absent."""

    exit_code = EXIT_USAGE


class LayerError(HookdumpError):
    """Unknown layer path, a container, a module that never runs, a layer that did not fire."""

    exit_code = EXIT_LAYER


class InputError(HookdumpError):
    """A bad image, checkpoint, model name, config or plugin."""

    exit_code = EXIT_INPUT


class NoMap(InputError):
    """A tensor with nothing to draw: empty, a vector per image, tokens off a square grid, windowed
    attention. ``show`` of many tensors skips these with a note; of one, it is an input error."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (exit 130) or a signal (SIGTERM: 143, 128 + its number) that stops the run; ``detail`` says
    what of it was kept."""

    def __init__(self, exit_code: int, detail: str = "nothing of this run was kept.") -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code
        self.detail = detail


def closest(word: str, choices: list[str], n: int = 5) -> list[str]:
    """The choices that look most like `word`, best first."""
    import difflib

    return difflib.get_close_matches(word, choices, n=n, cutoff=0.6)


def did_you_mean(word: str, choices: list[str], n: int = 5) -> str:
    """'Did you mean: a, b?' or an empty string when nothing is close."""
    found = closest(word, choices, n)
    return f"Did you mean: {', '.join(found)}?" if found else ""


#: Other names people type for a choice.
_SPELLINGS = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32"}


def check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    """A UsageError unless ``value`` is one of ``choices``; the hint names the choice it most looks like."""
    if value in choices:
        return
    near = [c for c in (value.lower(), _SPELLINGS.get(value.lower())) if c in choices] or closest(
        value, list(choices), 1
    )
    raise UsageError(
        f"{option} `{value}` is not one of {', '.join(choices)}.",
        f"Did you mean {option} {near[0]}?" if near else f"Use {option} {choices[0]}.",
    )


#: The errno values of a disk with no room left (or a quota used up).
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(where: str, kept: str = "") -> InputError:
    """The disk filled up while writing ``where``; ``kept`` says what of the run remains."""
    return InputError(
        f"The disk is full: writing {where} failed ({os.strerror(errno.ENOSPC)}). {kept}".rstrip(),
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
        from .units import human_bytes

        tried = re.search(r"tried to allocate (\d+) bytes", str(exc))
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        what = f"{human_bytes(int(tried[1]))} more were asked for at once" if tried else lines[0]
        return InputError(
            f"Out of memory: {what}.",
            "Use a smaller --batch-size or --input-size, fewer layers, or a machine (or GPU) with more"
            " memory.",
        )
    return None
