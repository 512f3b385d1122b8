"""hookdump: capture what any layer of a timm vision model sees, and know why a hook would not fire."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .store.folder.reader import Capture

__all__ = ["__version__", "open"]


def open(out: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Capture:
    """A capture folder as a mapping of tensor name to memory-mapped array: ``open("out")["layer1"]``.

    ``out`` may be a URL on object storage (``s3://bucket/acts``; ``storage_options``: the storage's, e.g.
    ``{"anon": True}``): the capture is read from a local copy, fetched once and kept while it is the same.
    See :class:`hookdump.store.folder.reader.Capture`.
    """
    # here for speed: numpy loads on the first call, not on import hookdump
    from . import urls
    from .store.folder.reader import Capture

    with urls.given(storage_options):
        return Capture(out)
