"""hookdump: capture what any layer of a timm vision model sees, and know why a hook would not fire."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .version import __version__

if TYPE_CHECKING:
    from .store.folder.reader import Capture

__all__ = ["__version__", "open"]


def open(out: str | os.PathLike[str]) -> Capture:
    """A capture folder as a mapping of tensor name to memory-mapped array: ``open("out")["layer1"]``.

    See :class:`hookdump.store.folder.reader.Capture`.
    """
    from .store.folder.reader import (
        Capture,  # here for speed: numpy loads on the first call, not on import hookdump
    )

    return Capture(out)
