"""What ``compare --png`` and ``top`` left in a capture folder, read back for the report: each
``compare/<metric>.json`` with its heat map, each ``top/<layer>/top.json`` with its contact sheets (the
files ``analysis.results`` names), as records; one made from an earlier capture in the folder is marked so.
Files that are not such a record are left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..analysis.results import COMPARE_FOLDER, TOP_FOLDER, TOP_JSON, read_result
from .records import ChannelSheet, CompareSection, Figure, TopSection

STALE = (
    "Made from an earlier capture in this folder (its manifest.json has changed since): run `hookdump {}`"
    " again to bring it up to date."
)


def analyses(
    out: Path, manifest_sha256: str, order: list[str]
) -> tuple[list[CompareSection], list[TopSection], list[str]]:
    """The compare and top results in ``out`` (top's in the capture's tensor ``order``), and notes for the
    records that could not be read."""
    notes: list[str] = []
    compares, tops = [], []
    for kind, pattern in (("compare", f"{COMPARE_FOLDER}/*.json"), ("top", f"{TOP_FOLDER}/*/{TOP_JSON}")):
        for path in sorted(out.glob(pattern)):
            data = read_result(path, kind)
            if data is None:
                continue  # a file of someone else's
            try:
                if kind == "compare":
                    compares.append(_compare(path, out, data, manifest_sha256))
                else:
                    tops.append(_top(path, out, data, manifest_sha256))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                notes.append(f"{path.relative_to(out)} is not a result hookdump can show ({exc!r}): left out")
    rank = {name: i for i, name in enumerate(order)}
    tops.sort(key=lambda t: (rank.get(t.layer, len(rank)), t.layer))
    return compares, tops, notes


def _figure(out: Path, png: Path) -> Figure:
    """The picture's link and size, read from its header; no link when it is not there."""
    from PIL import Image, UnidentifiedImageError  # for speed: Pillow only when there is a picture

    if not png.is_file():
        return Figure(None)
    try:
        with Image.open(png) as image:
            return Figure(png.relative_to(out).as_posix(), image.width, image.height)
    except (OSError, UnidentifiedImageError):
        return Figure(None)


def _stale(data: dict[str, Any], key: str, manifest_sha256: str, command: str) -> str:
    return "" if data.get(key) == manifest_sha256 else STALE.format(command)


def _compare(path: Path, out: Path, data: dict[str, Any], sha: str) -> CompareSection:
    metric = str(data["metric"])
    how: dict[str, str] = {k: str(data[k]) for k in ("estimator", "distance", "method") if k in data}
    if data.get("reduce", "none") != "none":
        how["reduce"] = str(data["reduce"])
    matrix = [[None if v is None else float(v) for v in row] for row in data["matrix"]]
    rows, cols = [str(r) for r in data["rows"]], [str(c) for c in data["cols"]]
    if len(matrix) != len(rows) or any(len(row) != len(cols) for row in matrix):
        raise ValueError("its matrix is not rows x cols")
    return CompareSection(
        path.relative_to(out).as_posix(), metric, how, str(data["a"]), data.get("b"), int(data["inputs"]),
        rows, cols, matrix, _figure(out, path.parent / Path(str(data["png"])).name),
        _stale(data, "a_manifest_sha256", sha, "compare ... --png"),
    )  # fmt: skip


def _top(path: Path, out: Path, data: dict[str, Any], sha: str) -> TopSection:
    sheets = []
    for c in data["channels"]:
        ranked = [
            {"index": int(i["index"]), "input": str(i["input"]), "value": float(i["value"])} for i in c["top"]
        ]
        left = [{"index": int(i["index"]), "input": str(i["input"])} for i in c.get("excluded") or []]
        png = path.parent / Path(str(c["png"])).name if c.get("png") else None
        figure = _figure(out, png) if png else Figure(None)
        sheets.append(ChannelSheet(int(c["channel"]), ranked, figure, left))
    return TopSection(
        path.relative_to(out).as_posix(), str(data["layer"]), str(data["by"]), int(data["k"]), sheets,
        _stale(data, "out_manifest_sha256", sha, "top ..."),
    )  # fmt: skip
