"""What ``hookdump capture`` sets up before torch is imported (no torch import here).

* Huge pages for torch's CPU allocator (``THP_MEM_ALLOC_ENABLE=1``, Linux) when the run will take many
  batches: each batch allocates its activations afresh, and with 2 MB pages the kernel takes 512 times fewer
  page faults for them (resnet50 on a folder, 2 cores: 15-20% less wall time). For a single batch it does
  not pay: the first touch of a large checkpoint's weights is slower with huge pages. Torch reads the variable
  once, at its first allocation, so it is set here or never; a value the user set is kept.
* The checkpoint's sha256 for the manifest, on a thread, while the main thread imports torch and timm (which
  keeps one core busy and leaves the other idle).

Neither changes a result: the same tensors come out, bit for bit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import digest

HUGE_PAGES = "THP_MEM_ALLOC_ENABLE"


def before_torch(images: list[str], batch_size: int, checkpoint: Path | None) -> None:
    """Prepare the capture process; call before anything imports torch."""
    if sys.platform.startswith("linux") and many_batches(images, batch_size):
        os.environ.setdefault(HUGE_PAGES, "1")
    digest.prefetch(checkpoint)


def many_batches(images: list[str], batch_size: int) -> bool:
    """Whether the inputs named on the command line are likely to take more than one forward pass: a
    folder, a glob, an ``@list`` or more files than a batch holds (decided without reading a folder)."""
    if len(images) > max(batch_size, 1):
        return True
    return any(text.startswith("@") or set(text) & set("*?[") or Path(text).is_dir() for text in images)
