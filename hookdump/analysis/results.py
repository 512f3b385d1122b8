"""The JSON record ``compare --png`` and ``top`` write beside their pictures (``compare/<metric>.json`` beside
``<metric>.png``, ``top/<layer>/top.json`` beside the contact sheets): what ``--json`` prints, the picture
files' names and the sha256 of the capture's manifest; and reading it back, which ``hookdump report`` does to
show each in a section of its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..digest import sha256
from ..store.folder.manifest import MANIFEST
from ..store.formats import nonfinite

COMPARE_FOLDER = "compare"  # compare's default --out, inside A
TOP_FOLDER = "top"  # top's default sheets folder is TOP_FOLDER/<layer>, inside OUT
TOP_JSON = "top.json"
KIND = "hookdump_result"  # the key that marks a result file: "compare" or "top"


def compare_json(metric: str) -> str:
    """The name of compare's record beside its heat map ``<metric>.png``."""
    return f"{metric}.json"


def manifest_sha256(capture: Path) -> str | None:
    """The sha256 of a capture's ``manifest.json``: which capture a result was made from."""
    try:
        return sha256(capture / MANIFEST)
    except OSError:
        return None


def result_writer(
    kind: str, record: dict[str, Any], captures: dict[str, Path | None]
) -> Callable[[Path], object]:
    """What writes ``record`` (a result's ``as_dict()``) to the path it is given, with ``kind`` and the
    sha256 of each capture's manifest (``a_manifest_sha256``, ...) it was made from (the caller's claim on
    the folder stages it)."""
    shas = {f"{k}_manifest_sha256": None if v is None else manifest_sha256(v) for k, v in captures.items()}
    text = json.dumps(nonfinite.safe({KIND: kind, **record, **shas}), indent=1, allow_nan=False) + "\n"
    return lambda path: path.write_text(text, encoding="utf-8")


def read_result(path: Path, kind: str) -> dict[str, Any] | None:
    """The record at ``path`` when it is a ``kind`` result that hookdump wrote, else None (another file)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get(KIND) == kind else None
