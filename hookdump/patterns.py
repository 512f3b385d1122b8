"""Names as people pick them: ``model.blocks[3]`` paths, globs (``*`` within one dotted segment, ``**``
across) and ``re:`` regexes. One matcher for modules (``capture -l``, ``list-modules --filter``) and for
the tensors of a capture folder (``compare --layers``), so a pattern means the same thing everywhere."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

from .errors import UsageError

_INDEX = re.compile(r"(?<=[^.\[])\[(\d+)\]")  # `blocks[3]` indexes; `blocks.[05]` is a glob's set
_GLOB_CHARS = set("*?[")


def normalize(spec: str) -> str:
    """``model.pos_block[3].proj[0]`` -> ``pos_block.3.proj.0``; ``blocks.[05]`` stays (a glob: 0 or 5)."""
    path = _INDEX.sub(r".\1", spec.strip()).replace("..", ".").strip(".")
    return path[len("model.") :] if path.startswith("model.") else path


def glob_regex(pattern: str, spec: str | None = None) -> re.Pattern[str]:
    """A glob where ``*`` matches within one dotted segment and ``**`` across segments; errors name ``spec``
    (what the user wrote) when given."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append(r"[^.]*")
        elif char == "?":
            out.append(r"[^.]")
        elif char == "[":
            end = pattern.find("]", i)
            if end == -1:
                raise UsageError(
                    f"Layer pattern `{spec or pattern}` has an unclosed `[`.",
                    "Close it (`layer[1-3]`), or write the pattern as a regular expression (re:...).",
                )
            out.append(pattern[i : end + 1])
            i = end + 1
            continue
        else:
            out.append(re.escape(char))
        i += 1
    try:
        return compile_quietly("".join(out))
    except re.error as exc:  # a `[...]` class regex refuses: `[]`, `[z-a]`, `[\]`
        raise UsageError(
            f"Layer pattern `{spec or pattern}` is not a valid glob: {exc}.",
            "Fix its `[...]` part (a set of characters, e.g. `layer[1-3]`), or leave the brackets out.",
        ) from None


def compile_quietly(regex: str) -> re.Pattern[str]:
    """``re.compile`` without the FutureWarning that `[[` raises (printed on stderr with a source line)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile(regex)


def match(spec: str, names: Sequence[str]) -> list[str] | None:
    """Names a pattern spec matches; None when ``spec`` is a plain path, not a pattern."""
    if spec.startswith("re:"):
        try:
            regex = compile_quietly(spec[3:])
        except re.error as exc:
            raise UsageError(
                f"Bad regular expression in `{spec}`: {exc}.", "Fix the pattern after `re:`."
            ) from exc
        return [n for n in names if regex.search(n)]
    path = normalize(spec)
    if not _GLOB_CHARS & set(path):
        return None
    regex = glob_regex(path, spec)
    return [n for n in names if regex.fullmatch(n)]
