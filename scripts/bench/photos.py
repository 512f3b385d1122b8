"""The inputs the benchmarks share: scikit-image's photos cycled, their mirror images, tiny noise photos,
copies of the bundled photo; each in a new folder."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from harness import ROOT


def _sources() -> list[Path]:
    """scikit-image's RGB and grayscale sample photos, in order."""
    from PIL import Image

    data = Path(importlib.util.find_spec("skimage").origin).parent / "data"  # type: ignore[arg-type,union-attr]
    return [p for p in sorted(data.glob("*.png")) if Image.open(p).mode in ("RGB", "L")]


def _linked(folder: Path, sources: list[Path], count: int) -> Path:
    """``count`` hard links (or copies) of ``sources``, cycled, in a new ``folder``."""
    folder.mkdir()
    for i in range(count):
        target = folder / f"img{i:05d}.png"
        try:
            os.link(sources[i % len(sources)], target)
        except OSError:
            shutil.copy(sources[i % len(sources)], target)
    return folder


def photos(folder: Path, count: int) -> Path:
    """``count`` hard links (or copies) of scikit-image's RGB and grayscale photos, cycled."""
    return _linked(folder, _sources(), count)


def mirrored(folder: Path, count: int) -> Path:
    """``count`` photos: scikit-image's RGB and grayscale photos and their mirror images (written once
    beside ``folder``), cycled as hard links."""
    from PIL import Image, ImageOps

    made = folder.with_name(folder.name + "-sources")
    made.mkdir()
    sources = _sources()
    for p in list(sources):
        ImageOps.mirror(Image.open(p)).save(made / f"mirrored-{p.name}")
        sources.append(made / f"mirrored-{p.name}")
    return _linked(folder, sources, count)


def tiny(folder: Path, count: int) -> Path:
    """``count`` 16x16 PNG photos, each its own (seeded noise)."""
    import numpy as np
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / f"{i:06d}.png")
    return folder


def copies(folder: Path, count: int) -> Path:
    """``count`` copies of the bundled photo (scikit-image's ``chelsea``) in a new ``folder``."""
    folder.mkdir()
    for i in range(count):
        shutil.copy(ROOT / "hookdump" / "data" / "sample.jpg", folder / f"img{i:04d}.jpg")
    return folder
