"""Inputs that are a part of a file, not a file of their own: a table's row (``FILE::ROW``, :mod:`.tables`)
and a tar shard's sample (``SHARD::KEY``, :mod:`.shards`). Each kind is a module of this wing that gives
what :class:`Kind` names; ``KINDS`` registers it, and the rest of the wing asks this module, never a kind by
name. A new kind of input (a zip archive's member, a video's frame) is one module and one line here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from . import shards, tables

if TYPE_CHECKING:
    from .spec import InputSpec


class Kind(Protocol):
    """What a kind of part gives (each function of its module)."""

    def names(self, text: str, listed: bool = False, /) -> bool:
        """Whether an input as the user typed it (``listed``: a line of an ``@list``) names such files."""

    def addresses(self, text: str, spec: InputSpec, /) -> list[Path]:
        """Every part of the files ``text`` names, in order, as ``FILE::KEY`` addresses."""

    def is_part(self, path: Path | str, /) -> bool:
        """Whether an input address is a part of this kind."""

    def split(self, path: Path | str, /) -> tuple[Path, Any]:
        """An address as its file and its key in it."""

    def holds(self, path: Path | str, /) -> bool:
        """Whether the part is there to be read."""

    def image_bytes(self, path: Path | str, image_key: str | None = None, /) -> bytes:
        """The part's encoded image (``image_key``: its image member or column)."""

    def label(self, path: Path | str, column: str | None = None, /) -> dict[str, Any]:
        """The part's label (and metadata) as the inputs' records keep them."""


#: The kinds, tried in this order (a table's row before a shard's sample).
KINDS: tuple[Kind, ...] = (tables, shards)


def named(text: str, listed: bool = False) -> Kind | None:
    """The kind of files an input as the user typed it names, or None (files, folders, globs)."""
    return next((kind for kind in KINDS if kind.names(text, listed)), None)


def kind_of(path: Path | str) -> Kind | None:
    """The kind of part an input address is, or None for a file of its own."""
    if shards.SEPARATOR not in str(path):  # a file (its name not parsed: the hot path of every input)
        return None
    return next((kind for kind in KINDS if kind.is_part(path)), None)


def image_bytes(path: Path | str, image_key: str | None) -> bytes | None:
    """The encoded image of an input that is a part (``image_key``: its image member or column), else None."""
    kind = kind_of(path)
    return None if kind is None else kind.image_bytes(path, image_key)


def container(path: Path) -> Path:
    """The file an input is read from: its own, or the one it is a part of."""
    kind = kind_of(path)
    return path if kind is None else kind.split(path)[0]


def holds(path: Path) -> bool:
    """Whether an input is there to be read: a file, or a part of one, there."""
    kind = kind_of(path)
    return path.is_file() if kind is None else kind.holds(path)


def label(path: Path, column: str | None) -> dict[str, Any]:
    """An input's label as the inputs' records keep them ({} for a file: a class folder's is its
    folder's name, :mod:`.classfolders`)."""
    kind = kind_of(path)
    return {} if kind is None else kind.label(path, column)
