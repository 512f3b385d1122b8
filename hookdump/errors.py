"""One error type for everything a user can get wrong, each kind with its exit code and a fix."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_LAYER = 3
EXIT_INPUT = 4
EXIT_STORAGE = 5


class HookdumpError(Exception):
    """A user-facing error: a short message naming the problem plus a hint with the fix."""

    exit_code = EXIT_FAILURE
    kind = "failure"  # what ``--json``'s error object calls it

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
    kind = "usage"


class LayerError(HookdumpError):
    """Unknown layer path, a container, a module that never runs, a layer that did not fire."""

    exit_code = EXIT_LAYER
    kind = "layer"


class InputError(HookdumpError):
    """A bad image, checkpoint, model name, config or plugin."""

    exit_code = EXIT_INPUT
    kind = "input"


class StorageError(HookdumpError):
    """A storage behind a URL that stopped answering (the network, the server) after hookdump tried again:
    nothing half-written is committed, and the same command (with ``--resume``) continues."""

    exit_code = EXIT_STORAGE
    kind = "storage"


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
