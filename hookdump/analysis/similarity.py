"""``hookdump compare A [B]``: the layer x layer similarity of one capture (each layer against each) or of
two (two models, or two checkpoints, on the same inputs): linear CKA (unbiased by default) or RSA, a table,
JSON, a heat map PNG, and under RSA the RDMs as ``.npy`` files in the inputs' order. Here: the layers and
inputs compared, the result and its table, the files claimed; ``simmatrix.py`` fills the matrix."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError, check_choice, did_you_mean
from ..pictures.heatmap import heatmap
from ..store.folder import claims
from ..store.folder.reader import Capture
from . import rsa
from .captures import check_inputs, open_capture, picked, select
from .gram import check_fits
from .pool import REDUCTIONS
from .results import COMPARE_FOLDER, compare_json, result_writer
from .simmatrix import RDMS, Grams, cka_matrix, rsa_matrix

METRICS = ("cka", "rsa")


@dataclass
class Similarity:
    """``matrix[i][j]``: the similarity of layer ``rows[i]`` (of A) and ``cols[j]`` (of B, or of A again);
    None where it is not defined. ``how``: the estimator (CKA) or distance and comparison (RSA)."""

    a: Path
    b: Path | None
    metric: str
    how: dict[str, str]
    inputs: int
    rows: list[str]
    cols: list[str]
    matrix: list[list[float | None]]
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reduce: str = "none"  # --reduce: how each tensor was pooled to (N, C) first

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": str(self.a), "b": None if self.b is None else str(self.b), "metric": self.metric, **self.how,
            "reduce": self.reduce,
            "inputs": self.inputs, "rows": self.rows, "cols": self.cols, "matrix": self.matrix,
            "files": [str(f) for f in self.files], "notes": self.notes,
        }  # fmt: skip

    def title(self) -> str:
        what = ", ".join(f"{k} {v}" for k, v in self.how.items()) + (
            f", --reduce {self.reduce}" if self.reduce != "none" else ""
        )
        of = f"{self.a} x {self.b}" if self.b is not None else str(self.a)
        return f"{self.metric.upper()} ({what}) of {of}, {self.inputs} inputs"

    def summary(self) -> str:
        """The matrix as a table (columns numbered, their names under it), and the files written."""
        if not self.matrix:  # --rdm-only
            return "\n".join(
                [f"RDMs ({self.how['distance']}) of {self.inputs} inputs:"]
                + [f"wrote {f}" for f in self.files]
            )
        same = self.rows == self.cols
        names = [f"[{i}] {r}" if same else r for i, r in enumerate(self.rows)]
        width = max(len(r) for r in names)
        head = " " * (width + 2) + " ".join(f"{f'[{j}]':>6}" for j in range(len(self.cols)))
        lines = [self.title() + ":", head]
        for name, row in zip(names, self.matrix, strict=True):
            cells = " ".join(f"{'-' if v is None else f'{v:.3f}':>6}" for v in row)
            lines.append(f"{name.ljust(width)}  {cells}")
        lines += [] if same else [f"[{j}] {c}" for j, c in enumerate(self.cols)]
        return "\n".join(lines + [f"wrote {f}" for f in self.files])


def compare(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str] | None = None,
    *,
    layers: Sequence[str] | None = None,
    metric: str = "cka",
    biased: bool = False,
    distance: str = "correlation",
    method: str = "spearman",
    png: bool = False,
    out: str | os.PathLike[str] | None = None,
    rdm_only: bool = False,
    allow_different_inputs: bool = False,
    reduce: str = "none",
) -> Similarity:
    """The similarity matrix of the layers of ``a`` (against those of ``b``, else of ``a``).

    Args:
        layers: names, globs or ``re:`` regexes of the tensors to compare (default all), in both captures.
        metric: ``cka`` (linear CKA; ``biased`` for the classic HSIC) or ``rsa`` (RDMs by ``distance``,
            ``correlation`` or ``euclidean``, compared by ``method``, ``spearman`` or ``tau-a``).
        png: draw the matrix as a heat map ``OUT/<metric>.png``, and write ``OUT/<metric>.json`` beside it
            (what ``as_dict`` gives, and the manifests' sha256), which ``hookdump report`` shows.
        out: where the PNG and the RDMs go (default ``A/compare``); RSA writes ``OUT/rdm/<layer>.npy``
            (``OUT/rdm/b/`` for B's) and ``OUT/rdm/inputs.json``, the inputs in the RDMs' order.
        rdm_only: write the RDMs and compare nothing (``rsa`` implied).
        reduce: ``mean``, ``max`` or ``cls``: each tensor pooled to ``(N, C)`` first, as ``capture --reduce``
            pools it (``pool.py``); ``none``: its values flattened.
    """
    check_choice("--metric", metric, METRICS)
    check_choice("--reduce", reduce, REDUCTIONS)
    metric = "rsa" if rdm_only else metric
    if metric == "rsa":
        check_choice("--distance", distance, rsa.DISTANCES)
        check_choice("--method", method, rsa.COMPARISONS)
    notes: list[str] = []
    left = open_capture(Path(a))
    right = open_capture(Path(b)) if b is not None else None
    if right is not None:
        check_inputs(left, right, allow_different_inputs, notes)
    rows, cols = _layers(left, right, layers)
    n = _inputs(left, rows, right, cols)
    check_fits(n, len(rows) + (len(cols) if right is not None else 0))
    folder = Path(out) if out is not None else left.path / COMPARE_FOLDER
    drawn = [f"{metric}.png", compare_json(metric)] if png and not rdm_only else []
    with claims.claim(folder, drawn + [RDMS + "/"] * (metric == "rsa"), "compare", "--out") as writing:
        grams = Grams(reduce)
        if metric == "cka":
            how = {"estimator": "biased" if biased else "unbiased"}
            grid = cka_matrix(grams, left, rows, right, cols, not biased)
        else:
            how = {"distance": distance, "method": method}
            grid, files = rsa_matrix(grams, left, rows, right, cols, distance, method, rdm_only, writing)
        notes += grams.notes()
        result = Similarity(
            Path(a), None if b is None else Path(b), metric, how, n, rows, cols, grid, notes=notes,
            reduce=reduce,
        )  # fmt: skip
        if metric == "rsa":
            result.files = files
        undefined = sorted({rows[i] for i, r in enumerate(grid) for v in r if v is None})
        if undefined and not rdm_only:
            notes.append(f"not defined (a layer constant over the inputs, or NaN): {', '.join(undefined)}")
        if drawn:
            result.files += [folder / name for name in drawn]
            record = {**result.as_dict(), "png": drawn[0]}
            captures = {"a": left.path, "b": None if right is None else right.path}
            writing.stage(drawn[0], heatmap(grid, rows, cols, result.title()))
            writing.stage(drawn[1], result_writer("compare", record, captures))
        writing.commit()
    return result


def _layers(left: Capture, right: Capture | None, specs: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The rows (A's tensors) and columns (B's, else A's again) that ``--layers`` picks. With two captures a
    spec may name tensors of one of them only, but one that names none of either is refused, not dropped."""
    if right is None or not specs:
        rows = select(list(left), specs, left.path)
        return rows, rows if right is None else select(list(right), specs, right.path)
    names_a, names_b = list(left), list(right)
    hits = {spec: (picked(names_a, spec), picked(names_b, spec)) for spec in specs}
    for spec, (in_a, in_b) in hits.items():
        if not in_a and not in_b:
            both = list(dict.fromkeys(names_a + names_b))
            raise UsageError(
                f"--layers `{spec}` matches no tensor of `{left.path}` or `{right.path}`.",
                did_you_mean(spec, both) or f"Their tensors: {', '.join(both[:8])}.",
            )
    return _in_order(left, {n for in_a, _ in hits.values() for n in in_a}), _in_order(
        right, {n for _, in_b in hits.values() for n in in_b}
    )


def _in_order(capture: Capture, found: set[str]) -> list[str]:
    """``found`` in the capture's order; none is a UsageError (every spec named the other capture only)."""
    if not found:
        raise UsageError(
            f"--layers matches no tensor of `{capture.path}`.", f"Its tensors: {', '.join(capture)}."
        )
    return [n for n in capture if n in found]


def _inputs(left: Capture, rows: list[str], right: Capture | None, cols: list[str]) -> int:
    """The number of inputs, the same for every tensor compared (batch first), else a UsageError."""
    counts = {(left.path, r): int(left.entries[r]["shape"][0]) for r in rows}
    if right is not None:
        counts |= {(right.path, c): int(right.entries[c]["shape"][0]) for c in cols}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name} ({count})" for (_, name), count in counts.items())
        raise UsageError(
            f"The tensors compared do not hold the same number of inputs: {listed}.",
            "Pick tensors captured over the same images with --layers.",
        )
    return next(iter(counts.values()))
