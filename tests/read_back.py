"""hookdump's drawn outputs read back, for the tests of pictures and reports: the report's page through the
standard library's HTML parser (its links, ids, sections, stat cells and images), and the tiles of show's
grid as grey levels."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
from PIL import Image

PAD, LABEL, MIN_TILE = 2, 12, 64  # the documented grid geometry


class Page(HTMLParser):
    """What a browser would fetch or follow (href, src), the ids, each section's text and stat cells."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.tags: set[str] = set()
        self.text: dict[str, str] = {}  # section id -> its text
        self.stats: dict[str, dict[str, tuple[str, list[str]]]] = {}  # id -> stat -> (data-value, classes)
        self.images: dict[str, tuple[str, int, int]] = {}  # section id -> (src, width, height)
        self.figures: dict[str, list[tuple[str, int, int]]] = {}  # every section's images, in order
        self.values: dict[str, list[float | None]] = {}  # data-value of cells and spans, not stats
        self.channels: dict[str, list[str]] = {}  # section id -> its text of each data-channel block
        self._channel: str | None = None
        self._section: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        for key in ("href", "src"):
            if key in a:
                self.links.append(a[key])
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "section":
            self._section = a.get("id")
            self.text[self._section or ""] = ""
        if self._section and "data-stat" in a:
            self.stats.setdefault(self._section, {})[a["data-stat"]] = (
                a["data-value"],
                a.get("class", "").split(),
            )
        if self._section and self._section.startswith("t-") and tag == "img":
            self.images[self._section] = (a["src"], int(a["width"]), int(a["height"]))
        if self._section and tag == "img":
            self.figures.setdefault(self._section, []).append((a["src"], int(a["width"]), int(a["height"])))
        if self._section and "data-value" in a and "data-stat" not in a:
            self.values.setdefault(self._section, []).append(json.loads(a["data-value"]))
        if self._section and "data-channel" in a:
            self._channel = a["data-channel"]
            self.channels.setdefault(self._section, []).append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = self._channel = None

    def handle_data(self, data: str) -> None:
        if self._section is not None:
            self.text[self._section] += data
        if self._section is not None and self._channel is not None:
            self.channels[self._section][-1] += data


def page_of(out: Path) -> Page:
    """``out``'s report page, parsed."""
    return Page((out / "index.html").read_text(encoding="utf-8"))


def check_links(out: Path) -> Page:
    """Every link is relative and names a file inside ``out`` (anchors name an id on the page)."""
    page = page_of(out)
    assert page.links
    for link in page.links:
        parts = urlsplit(link)
        assert not parts.scheme and not parts.netloc and not link.startswith("/"), link
        if link.startswith("#"):
            assert unquote(link[1:]) in {unquote(i) for i in page.ids}, link
            continue
        target = (out / unquote(parts.path)).resolve()
        assert target.is_file() and target.is_relative_to(out.resolve()), link
    return page


def section_id(page: Page, name: str) -> str:
    """The id of the section of the tensor ``name`` on the page."""
    return next(i for i in page.ids if unquote(i) == f"t-{name}")


def tiles(cli, out: Path, key: str, channels: str, h: int, w: int) -> dict[int, np.ndarray]:
    """The grey levels of each drawn tile of ``show OUT --key KEY --channels ...``, by channel."""
    result = cli("show", out, "--key", key, "--channels", channels, "--grey", "--json")
    assert result.exit_code == 0, result.stderr
    meta = json.loads(result.stdout)
    s = max(1, MIN_TILE // max(h, w))
    assert tuple(meta["tile"]) == (h * s, w * s)
    with Image.open(meta["path"]) as png:
        image = np.asarray(png.convert("L")).astype(float)
    return {
        t["channel"]: image[t["top"] : t["top"] + h * s : s, t["left"] : t["left"] + w * s : s]
        for t in meta["tiles"]
    }
