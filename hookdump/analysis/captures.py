"""Capture folders as ``hookdump diff`` and ``compare`` take them: opened through the store's reader, checked
to hold the same inputs, their tensors picked (``--layers``) and paired by name (``--map``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import patterns
from ..errors import InputError, UsageError, did_you_mean
from ..store.folder.reader import Capture


def open_capture(path: Path) -> Capture:
    """A finished capture folder (an InputError with the fix for anything else)."""
    if not path.exists():
        raise InputError(f"`{path}` does not exist.", "Pass the --out folder of a `hookdump capture` run.")
    if not path.is_dir():
        raise InputError(f"`{path}` is not a folder.", "Pass the --out folder of a `hookdump capture` run.")
    return Capture(path)


def _identity(entry: dict[str, Any]) -> Any:
    """What makes an input the same input: its sha256, or (a --random-input) its seed and shape."""
    if entry.get("sha256"):
        return entry["sha256"]
    return tuple(sorted((k, str(v)) for k, v in entry.items() if k != "path"))


def input_mismatch(a: Capture, b: Capture) -> str | None:
    """Why the two captures did not see the same inputs in the same order, naming the first input that
    differs on each side (or the first one side has beyond the other), or None when they did."""
    for i, (x, y) in enumerate(zip(a.inputs, b.inputs, strict=False)):
        if _identity(x) != _identity(y):
            return f"input {i} differs: {_shown(x)} in `{a.path}`, {_shown(y)} in `{b.path}`"
    if len(a.inputs) == len(b.inputs):
        return None
    longer = a if len(a.inputs) > len(b.inputs) else b
    first = min(len(a.inputs), len(b.inputs))
    return (
        f"`{a.path}` holds {len(a.inputs)} input(s), `{b.path}` {len(b.inputs)}: the first {first} are the"
        f" same, then `{longer.path}` has input {first}, {_shown(longer.inputs[first])}"
    )


def _shown(record: dict[str, Any]) -> str:
    """An input as a message names it: its path and sha256, or the seed of a random input."""
    if record.get("random"):
        return f"a random input (seed {record.get('seed')})"
    return f"{record.get('path')} (sha256 {str(record.get('sha256') or '?')[:12]}...)"


def check_inputs(a: Capture, b: Capture, allow_different: bool, notes: list[str]) -> None:
    """An InputError unless both captures saw the same images (by the manifests' sha256), in order;
    ``allow_different``: a note instead."""
    why = input_mismatch(a, b)
    if why is None:
        return
    if not allow_different:
        raise InputError(
            f"The two captures were not made from the same inputs: {why}. Their tensors cannot be compared.",
            "Capture both from the same images (same files, same order), or pass --allow-different-inputs"
            " if the difference is what you mean to measure.",
        )
    notes.append(f"--allow-different-inputs: {why}; compared anyway")


def parse_maps(specs: Sequence[str]) -> list[tuple[re.Pattern[str], str, str]]:
    """``--map 'PATTERN=REPLACEMENT'`` (a Python regex and its replacement, split at the first ``=``)."""
    maps = []
    for spec in specs:
        pattern, sep, replacement = spec.partition("=")
        if not sep or not pattern:
            raise UsageError(
                f"--map `{spec}` is not PATTERN=REPLACEMENT.",
                r"Write it as a regex and its replacement, e.g. --map 'pos_block\.(\d+)=pos_embeds.\1'.",
            )
        try:
            maps.append((re.compile(pattern), replacement, spec))
        except re.error as exc:
            raise UsageError(
                f"--map `{spec}`: `{pattern}` is not a regex: {exc}.", "Fix the pattern."
            ) from exc
    return maps


def pair_names(
    names_a: Sequence[str], names_b: Sequence[str], maps: Sequence[str], notes: list[str]
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """A's names (in A's order) paired with B's through ``maps`` applied to A's names in turn; and the names
    of A, and of B, left without a partner. A map that renames nothing is a note."""
    compiled = parse_maps(maps)
    used = dict.fromkeys((spec for _, _, spec in compiled), False)
    mapped: dict[str, str] = {}
    for name in names_a:
        new = name
        for pattern, replacement, spec in compiled:
            try:
                renamed = pattern.sub(replacement, new)
            except (re.error, IndexError) as exc:
                raise UsageError(f"--map `{spec}`: {exc}.", "Fix the replacement.") from exc
            used[spec] = used[spec] or renamed != new
            new = renamed
        mapped[name] = new
    notes += [
        f"--map `{spec}` renamed no tensor of the first capture" for spec, hit in used.items() if not hit
    ]
    seen: dict[str, str] = {}
    for name, new in mapped.items():
        if new in seen:
            raise UsageError(
                f"--map sends both `{seen[new]}` and `{name}` to `{new}`.", "Make the maps one to one."
            )
        seen[new] = name
    in_b = set(names_b)
    pairs = [(name, new) for name, new in mapped.items() if new in in_b]
    taken = {new for _, new in pairs}
    return pairs, [n for n, new in mapped.items() if new not in in_b], [n for n in names_b if n not in taken]


def picked(names: Sequence[str], spec: str) -> list[str]:
    """The names one spec picks (none is no error here); a malformed glob or regex is a UsageError."""
    matched = patterns.match(spec, names)
    if matched is not None:
        return matched
    path = patterns.normalize(spec)
    return [n for n in names if n == path]


def select(names: Sequence[str], specs: Sequence[str] | None, where: Path) -> list[str]:
    """The names that ``specs`` pick, in capture order; all when none. A spec is read as ``capture -l`` reads
    one (``patterns.match``: ``*`` within one dotted segment, ``**`` across, ``re:``); one that picks nothing
    is a UsageError naming the closest names."""
    if not specs:
        return list(names)
    chosen: set[str] = set()
    for spec in specs:
        hits = set(picked(names, spec))
        if not hits:
            raise UsageError(
                f"--layers `{spec}` matches no tensor of `{where}`.",
                did_you_mean(spec, list(names)) or f"Its tensors: {', '.join(list(names)[:8])}.",
            )
        chosen |= hits
    return [n for n in names if n in chosen]
