"""Where the images come from, as the user gave them (``InputSpec``: paths, ``--sample``, ``--random-input``,
a tar sample's member, a table's columns), the bundled sample photo, and ``--input-size`` parsed."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class InputSpec:
    """Where the images come from."""

    paths: tuple[str, ...] = ()
    sample: bool = False
    random: bool = False
    seed: int = 0
    input_size: tuple[int, int, int] | None = None
    image_key: str | None = None  # a tar shard sample's image member (its extension); None: the first image
    image_column: str | None = (
        None  # a Parquet / datasets table's column of images; None: `image`, or the one
    )
    label_column: str | None = None  # ... its column of labels

    @property
    def image_part(self) -> str | None:
        """Which part of an input holds its image: a tar sample's member, a table's column."""
        return self.image_key or self.image_column


def sample_path() -> Path:
    """The public-domain photo bundled with hookdump (scikit-image's ``chelsea``, downscaled)."""
    return Path(str(resources.files("hookdump") / "data" / "sample.jpg"))


def parse_input_size(text: str) -> tuple[int, int, int]:
    """``3,224,224`` -> ``(3, 224, 224)``."""
    parts = text.replace("x", ",").split(",")
    try:
        c, h, w = (int(p) for p in parts)
    except ValueError:
        c = h = w = 0
    if min(c, h, w) < 1:
        raise UsageError(f"--input-size `{text}` is not C,H,W.", "Write it like 3,224,224.")
    return c, h, w
