"""hookdump: capture what any layer of a timm vision model sees, and know why a hook would not fire."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .reader import Capture

__version__ = "0.1.0"


def open(out: str | os.PathLike[str]) -> Capture:
    """A capture folder as a mapping of tensor name to memory-mapped array: ``open("out")["layer1"]``.

    See :class:`hookdump.reader.Capture`; numpy is imported on the first call, not by ``import hookdump``.
    """
    from .reader import Capture

    return Capture(out)
