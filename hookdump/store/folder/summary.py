"""``hookdump stats OUT``: each tensor's numbers at a glance, from the manifest (or, for a capture made before
they were recorded, computed from the files), as rows and as the aligned table the command prints."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..formats import nonfinite
from ..formats.stats import FINITE_ONLY, KEYS, number, of, percent
from .reader import Capture


def collect(out: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """``hookdump stats OUT``: one row per tensor (manifest order), its stats from the manifest or, where
    the manifest has none (a capture made before they were recorded), computed from the memory-mapped
    file; and the notes that say so."""
    capture = Capture(out)
    rows: list[dict[str, Any]] = []
    computed: list[str] = []
    for name, entry in capture.entries.items():
        stats = entry.get("stats")
        source = "manifest"
        if not isinstance(stats, dict) or any(k not in stats for k in KEYS):
            stats, source = of(capture[name]), "files"
            computed.append(name)
        row = {"name": name, "file": entry["file"], "shape": list(entry["shape"]), "dtype": entry["dtype"]}
        rows.append({**row, **{k: stats[k] for k in KEYS}, "source": source})
    notes = [
        line
        for r in rows
        for line in nonfinite.note(
            r["name"], nonfinite.Count(r["nan"], r["inf"], math.prod(r["shape"])), FINITE_ONLY
        )
    ]
    if computed:
        notes.append(
            f"{out}/manifest.json records no stats for {len(computed)} of {len(rows)} tensor(s) (a capture"
            f" made before hookdump recorded them): computed from the files ({', '.join(computed[:3])}"
            f"{', ...' if len(computed) > 3 else ''})"
        )
    return rows, notes


def table(rows: list[dict[str, Any]]) -> str:
    """The rows of ``collect`` as an aligned table, a header line first; numbers right-aligned."""
    head = ("name", "shape", "dtype", "min", "max", "mean", "std", "zeros", "NaN", "Inf")
    cells = [head] + [
        (
            r["name"], str(tuple(r["shape"])), r["dtype"],
            *(number(r[k], 4) for k in ("min", "max", "mean", "std")),
            percent(r["zeros"], 1), f"{r['nan']:,}", f"{r['inf']:,}",
        )
        for r in rows
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    lines = ["  ".join(_pad(row[i], w, i < 3) for i, w in enumerate(widths)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _pad(cell: str, width: int, text: bool) -> str:
    return cell.ljust(width) if text else cell.rjust(width)
