"""The HTML of the report's sections for what ``compare`` and ``top`` left in the capture folder: the heat
map with its layers, metric, estimator and values; each channel's contact sheet with its inputs and values.
Every text escaped, every link relative. Never prints."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from .markup import anchor, e, href

if TYPE_CHECKING:
    from .records import CompareSection, Figure, Report, TopSection


def compare_id(c: CompareSection) -> str:
    return anchor("compare-", PurePosixPath(c.record).stem)


def top_id(t: TopSection) -> str:
    return anchor("top-", t.layer)


def analyses_toc(report: Report) -> str:
    """The contents line's links to the compare and top sections (nothing when there are none)."""
    links = [f'<a href="#{compare_id(c)}">{e(c.metric.upper())}</a>' for c in report.compares]
    links += [f'<a href="#{top_id(t)}">top of {e(t.layer)}</a>' for t in report.tops]
    return "".join(f" · {link}" for link in links)


def _how(how: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in how.items())


def _img(picture: Figure, alt: str, caption: str) -> str:
    if picture.src is None:
        return f'<p class="none">No picture: the PNG beside the record is gone. {caption}</p>'
    return (
        f'<figure><img src="{href(picture.src)}" width="{picture.width}" height="{picture.height}"'
        f' alt="{e(alt)}"><figcaption>{caption}</figcaption></figure>'
    )


def _stale(text: str) -> str:
    return f'<div class="banner">{e(text)}</div>' if text else ""


def _cell(value: float | None) -> str:
    shown = "-" if value is None else f"{value:.3f}"
    return f'<td data-value="{e(json.dumps(value))}">{shown}</td>'


def compare_section(c: CompareSection) -> str:
    """One ``compare --png`` result: the heat map, a caption naming what it shows, the values as a table."""
    of = f"<code>{e(c.a)}</code>" + ("" if c.b is None else f" x <code>{e(c.b)}</code>")
    same = c.rows == c.cols
    names = ", ".join(f"[{i}] {e(r)}" for i, r in enumerate(c.rows))
    layers = (
        f"layers {names}"
        if same
        else f"rows (A) {names}; columns (B) " + ", ".join(f"[{j}] {e(col)}" for j, col in enumerate(c.cols))
    )
    caption = (
        f"{e(c.metric.upper())} ({e(_how(c.how))}) of {of}, {c.inputs} inputs; {layers}; viridis from 0 to 1"
        " (magenta: not defined), as <code>hookdump compare --png</code> draws it"
    )
    head = "".join(f"<th>[{j}]</th>" for j in range(len(c.cols)))
    body = "".join(
        f"<tr><th>[{i}] {e(r)}</th>{''.join(_cell(v) for v in row)}</tr>"
        for i, (r, row) in enumerate(zip(c.rows, c.matrix, strict=True))
    )
    return (
        f'<section class="analysis compare" id="{compare_id(c)}"><h2>compare: {e(c.metric.upper())}'
        f' <span class="kind">{e(_how(c.how))}</span></h2>'
        f'<p class="meta">{len(c.rows)} x {len(c.cols)} layers of {of}, {c.inputs} inputs ·'
        f' <a href="{href(c.record)}">{e(c.record)}</a></p>{_stale(c.stale)}'
        f"{_img(c.picture, f'{c.metric} heat map', caption)}"
        f'<details><summary>Values ({len(c.rows)} x {len(c.cols)})</summary><table class="matrix">'
        f"<tr><th></th>{head}</tr>{body}</table></details></section>"
    )


def top_section(t: TopSection) -> str:
    """One ``top`` result: each channel's contact sheet, captioned with its inputs and values."""
    figures = []
    for sheet in t.channels:
        ranked = "; ".join(
            f"{n}. {e(PurePosixPath(str(i['input'])).name)} (input {i['index']})"
            f' <span data-value="{e(json.dumps(i["value"]))}">{i["value"]:.4g}</span>'
            for n, i in enumerate(sheet.top, 1)
        )
        caption = f"channel {sheet.channel}, top {len(sheet.top)} by {e(t.by)}: {ranked}"
        if sheet.excluded:  # a score that is NaN or infinite: not ranked, said
            left = ", ".join(
                f"{e(PurePosixPath(str(i['input'])).name)} (input {i['index']})" for i in sheet.excluded
            )
            caption += f"{'; ' * bool(sheet.top)}left out ({e(t.by)} NaN or infinite): {left}"
        drawn = (
            _img(sheet.picture, f"top inputs of channel {sheet.channel}", caption)
            if sheet.top
            else f'<p class="none">No picture: no input has a finite {e(t.by)} here. {caption}</p>'
        )
        figures.append(f'<div class="channel" data-channel="{sheet.channel}">{drawn}</div>')
    return (
        f'<section class="analysis top" id="{top_id(t)}"><h2>top: {e(t.layer)}'
        f' <span class="kind">top {t.k} by {e(t.by)}</span></h2>'
        f'<p class="meta">the {t.k} inputs of largest {e(t.by)} of each of {len(t.channels)} channel(s) of'
        f" <code>{e(t.layer)}</code>, as <code>hookdump top OUT --layer {e(t.layer)}</code> ranks them ·"
        f' <a href="{href(t.record)}">{e(t.record)}</a></p>{_stale(t.stale)}'
        f'<div class="sheets">{"".join(figures)}</div></section>'
    )
