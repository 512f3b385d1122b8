"""The HTML of the report's section of each tensor: its kind, layer, shape and files, its stats (NaN and Inf
marked, and said in words), its picture; and its line in the contents. Every text escaped, every link
relative. Never prints."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from ..store.formats import nonfinite
from ..store.formats.stats import FINITE_ONLY, number, percent
from .markup import anchor
from .markup import e as _e
from .markup import href as _href

if TYPE_CHECKING:
    from .records import Section


def tensors_toc(sections: list[Section]) -> str:
    """The contents' list items: one per tensor, its kind and shape, flagged when it holds NaN or Inf."""
    items = []
    for s in sections:
        flag = ' <span class="kind flag">NaN/Inf</span>' if _bad(s) else ""
        shape = _e(tuple(s.shape))
        items.append(
            f'<li><a href="#{_anchor(s)}">{_e(s.name)}</a> {_kind(s)} <code>{shape}</code>{flag}</li>'
        )
    return "".join(items)


def tensor_section(s: Section, first: str, images: int) -> str:
    """One tensor's section; ``first`` names the input its picture shows, of ``images``."""
    files = ", ".join(f'<a href="{_href(f)}">{_e(f)}</a>' for f in s.files)
    flag = ' <span class="kind flag">NaN/Inf</span>' if _bad(s) else ""
    meta = (
        f'<p class="meta">layer <code>{_e(s.layer)}</code> · shape <code>{_e(tuple(s.shape))}</code>'
        f" {_e(s.dtype)} · {files}</p>"
    )
    if s.picture:
        shown = f"image 0 ({_e(first)}) of {images}" if images > 1 else f"image 0 ({_e(first)})"
        picture = (
            f'<figure><img src="{_href(s.picture)}" width="{s.width}" height="{s.height}"'
            f' alt="channels of {_e(s.name)}"><figcaption>{shown}, as'
            f" <code>hookdump show OUT --key {_e(s.name)}</code> draws it</figcaption></figure>"
        )
    else:
        picture = f'<p class="none">No picture: {_e(s.no_picture)}</p>'
    cls = "tensor bad-values" if _bad(s) else "tensor"
    return (
        f'<section class="{cls}" id="{_anchor(s)}"><h2>{_e(s.name)} {_kind(s)}{flag}</h2>{meta}'
        f"{_stats(s)}{_nonfinite(s)}{picture}</section>"
    )


def _nonfinite(s: Section) -> str:
    """The NaN and Inf the tensor holds, in words (the one phrasing of ``store.formats.nonfinite``), and how
    the numbers and the picture treat them; nothing when it holds none."""
    found = nonfinite.Count(int(s.stats.get("nan") or 0), int(s.stats.get("inf") or 0), math.prod(s.shape))
    drawn = "; the picture draws them in magenta" if s.picture else ""
    return "".join(
        f'<p class="bad-note">{_e(line)}.</p>' for line in nonfinite.note(s.name, found, FINITE_ONLY + drawn)
    )


def _stats(section: Section) -> str:
    s = section.stats
    cells = [(k, number(s.get(k), 4), s.get(k), False) for k in ("min", "max", "mean", "std")]
    cells.append(("zeros", percent(s.get("zeros") or 0.0, 1), s.get("zeros"), False))
    cells += [(k, f"{s.get(k) or 0:,}", s.get(k), bool(s.get(k))) for k in ("nan", "inf")]
    head = "".join(f"<th>{'NaN' if k == 'nan' else 'Inf' if k == 'inf' else k}</th>" for k, *_ in cells)
    row = "".join(
        f'<td data-stat="{k}" data-value="{_e(json.dumps(v))}"{" class=bad" if bad else ""}>{_e(text)}</td>'
        for k, text, v, bad in cells
    )
    return f'<table class="stats"><tr>{head}</tr><tr>{row}</tr></table>'


def _anchor(section: Section) -> str:
    return anchor("t-", section.name)


def _kind(section: Section) -> str:
    index = "" if section.index is None else f" {section.index}"
    call = f" call {section.call}" if section.call else ""
    return f'<span class="kind k-{_e(section.kind)}">{_e(section.kind + index + call)}</span>'


def _bad(section: Section) -> bool:
    return bool(section.stats.get("nan") or section.stats.get("inf"))
