"""What every HTML module of the report shares: text escaped, relative links percent-encoded."""

from __future__ import annotations

from html import escape
from pathlib import PurePosixPath
from urllib.parse import quote


def e(value: object) -> str:
    """``value`` as HTML text, escaped."""
    return escape(str(value))


def href(path: str) -> str:
    """A relative link to a file in the capture folder, percent-encoded (``@``, spaces) and escaped."""
    return escape(quote(PurePosixPath(path).as_posix()))


def anchor(prefix: str, name: str) -> str:
    """An element id for ``name`` (percent-encoded, so any tensor name makes a valid fragment)."""
    return prefix + quote(name, safe="")
