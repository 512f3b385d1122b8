"""What every command prints beyond its own summary: notes on stderr, valid JSON, a result as JSON or its
summary."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from ..store.formats import nonfinite


def notes(lines: list[str]) -> None:
    """Announcements (aliases, default model, random weights) on stderr, so stdout stays data."""
    for line in lines:
        print(f"note: {line}", file=sys.stderr)


def result(found: Any, json_out: bool) -> None:
    """A command's result: its notes on stderr, then on stdout its JSON (``--json``) or its summary."""
    notes(found.notes)
    typer.echo(as_json(found.as_dict()) if json_out else found.summary())


def as_json(data: Any) -> str:
    """Valid JSON always: a float that is not finite is null (``store.formats.nonfinite``; notes say
    which)."""
    return json.dumps(nonfinite.safe(data), indent=2, allow_nan=False)
