"""What ``show`` draws and how (:class:`Style`), and what it wrote (:class:`Rendered`, :class:`Shown`): the
records shared by :mod:`hookdump.viz` and :mod:`hookdump.attnviz`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .grid import LABEL, PADDING, SCALES, Tile


@dataclass
class Style:
    """How to draw: which channels, how scaled, which colours; over a photo, as a heat map or Grad-CAM."""

    max_channels: int = 64
    channels: str | None = None
    top_k: int | None = None
    scale: str = "channel"
    grey: bool = False
    photo: Path | None = None
    alpha: float = 0.5
    gradcam: bool = False
    rollout: bool = False

    def check(self) -> None:
        """UsageErrors for options that contradict each other."""
        if self.channels is not None and self.top_k is not None:
            raise UsageError("--channels and --top-k both pick channels.", "Give one of them.")
        if self.scale not in SCALES:
            raise UsageError(
                f"--scale `{self.scale}` is not one of {', '.join(SCALES)}.", "Use --scale channel."
            )
        if self.gradcam and self.photo is None:
            raise UsageError("--gradcam lays the map over the photo the model saw.", "Add --overlay PHOTO.")
        if self.gradcam and self.rollout:
            raise UsageError("--gradcam and --rollout are two different pictures.", "Give one of them.")

    def colours(self, heat: bool) -> str:
        """The colour map: grey with ``--grey``, else inferno for heat maps and viridis for grids."""
        return "grey" if self.grey else "inferno" if heat else "viridis"

    @property
    def suffix(self) -> str:
        return ".gradcam" if self.gradcam else ".overlay" if self.photo is not None else ""


@dataclass
class Rendered:
    """One PNG written by :func:`show`, what it shows, and where its tiles are (``tiles``: the top-left
    pixel of each channel's map; see :mod:`hookdump.grid` for the geometry)."""

    path: Path
    width: int
    height: int
    source: str
    name: str
    shape: list[int]
    index: int
    layout: str
    channels: int
    channels_shown: int
    columns: int = 0
    tile: tuple[int, int] = (0, 0)
    overlay: Path | None = None
    fit: str = ""
    notes: list[str] = field(default_factory=list)
    kind: str = "grid"
    selection: str = ""
    scale: str = ""
    colormap: str = ""
    padding: int = PADDING
    label_height: int = LABEL
    caption_height: int = 0
    tiles: list[Tile] = field(default_factory=list)
    target: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """``show --json``: every field, paths as strings."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


@dataclass
class Shown:
    """Every PNG :func:`show_many` wrote, the tensors it skipped (in ``notes``), and whether the request
    named several pictures (``--json`` then prints a list)."""

    rendered: list[Rendered]
    notes: list[str]
    many: bool
