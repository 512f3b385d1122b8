"""What the report page shows, as records: each tensor (:class:`Section`), each input
(:class:`InputRow`), what ``compare`` and ``top`` left in the folder (:class:`CompareSection`,
:class:`TopSection`) and the whole (:class:`Report`), made by :mod:`hookdump.report.build` and drawn as
HTML by :mod:`hookdump.report.page`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Section:
    """One captured tensor on the page."""

    name: str  # the tensor name: file stem or safetensors key (``hookdump show OUT --key NAME``)
    layer: str
    kind: str  # output, input, grad, attn
    index: int | str | None
    call: int
    shape: list[int]
    dtype: str
    files: list[str]  # relative to OUT
    stats: dict[str, Any]
    picture: str | None = None  # relative to OUT
    width: int = 0
    height: int = 0
    no_picture: str = ""  # why there is none


@dataclass
class InputRow:
    """One input of the capture, with its thumbnail when the photo could be read."""

    number: int
    label: str
    sha256: str | None
    size: list[int] | None
    thumbnail: str | None = None  # relative to OUT
    width: int = 0
    height: int = 0
    no_thumbnail: str = ""


@dataclass
class Figure:
    """A picture ``compare`` or ``top`` drew, as the page shows it; ``src`` None when the file is gone."""

    src: str | None  # relative to OUT
    width: int = 0
    height: int = 0


@dataclass
class CompareSection:
    """A ``compare --png`` result kept in ``OUT/compare``: its heat map and its values."""

    record: str  # the JSON, relative to OUT
    metric: str
    how: dict[str, str]  # estimator, or distance and method
    a: str
    b: str | None
    inputs: int
    rows: list[str]
    cols: list[str]
    matrix: list[list[float | None]]
    picture: Figure
    stale: str = ""  # why it may not be of the capture the folder holds now


@dataclass
class ChannelSheet:
    """One channel of a ``top`` result: its top inputs (``index``, ``input``, ``value``) and sheet, and the
    inputs (``index``, ``input``) it left out for a score that is NaN or infinite."""

    channel: int
    top: list[dict[str, Any]]
    picture: Figure
    excluded: list[dict[str, Any]] = field(default_factory=list)  # NaN or infinite score: not ranked


@dataclass
class TopSection:
    """A ``top`` result kept in ``OUT/top/<layer>``: a contact sheet per channel."""

    record: str  # the JSON, relative to OUT
    layer: str
    by: str
    k: int
    channels: list[ChannelSheet]
    stale: str = ""


@dataclass
class Report:
    """What ``build`` wrote."""

    path: Path  # OUT/index.html
    folder: Path  # OUT/report
    sections: list[Section]
    inputs: list[InputRow]
    banner: str = ""
    notes: list[str] = field(default_factory=list)
    compares: list[CompareSection] = field(default_factory=list)
    tops: list[TopSection] = field(default_factory=list)

    @property
    def pictures(self) -> list[Path]:
        return [self.path.parent / s.picture for s in self.sections if s.picture]

    @property
    def thumbnails(self) -> list[Path]:
        return [self.path.parent / i.thumbnail for i in self.inputs if i.thumbnail]

    def as_dict(self) -> dict[str, Any]:
        """``report --json``."""
        return {
            "path": str(self.path), "folder": str(self.folder),
            "sections": [asdict(s) for s in self.sections],
            "pictures": [str(p) for p in self.pictures], "thumbnails": [str(p) for p in self.thumbnails],
            "banner": self.banner or None, "notes": self.notes,
            "compare": [asdict(c) for c in self.compares], "top": [asdict(t) for t in self.tops],
        }  # fmt: skip

    def summary(self) -> str:
        """The lines ``report`` prints."""
        drawn = len(self.pictures)
        found = (
            [f"{len(self.compares)} compare", f"{len(self.tops)} top"] if self.compares or self.tops else []
        )
        return (
            f"wrote {self.path}: {len(self.sections)} tensor(s), {drawn} picture(s), {len(self.thumbnails)}"
            f" input thumbnail(s){''.join(f', {f} section(s)' for f in found)}"
            f"\n  open {self.path.resolve().as_uri()}"
        )
