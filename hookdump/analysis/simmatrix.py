"""The matrix ``hookdump compare`` fills: each tensor's Gram matrix (of its values flattened, or pooled to
``(N, C)`` under ``--reduce``), linear CKA of every row layer with every column layer, or RSA's RDMs of every
layer, staged as ``.npy`` files in the inputs' order, and compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from ..failures import from_environment
from ..store.folder import claims
from ..store.folder.reader import Capture
from . import cka, rsa
from .gram import Gram, gram, gram_of
from .pool import reduced

RDMS = "rdm"  # the folder of RSA's RDMs, in compare's --out


class Grams:
    """Each tensor's Gram matrix: of its values flattened, or (``--reduce``) of its ``(N, C)`` pooled form;
    what the pooling left as it was, or left out, said once in notes."""

    def __init__(self, reduce: str) -> None:
        self.reduce = reduce
        self.kept: list[str] = []
        self.prefixes: dict[str, int] = {}

    def __call__(self, capture: Capture, name: str) -> Gram:
        if self.reduce == "none":
            return gram(capture, name)
        pooled = reduced(capture, name, self.reduce, self.kept, self.prefixes)
        return (
            gram(capture, name) if pooled is None else gram_of(pooled, what=f"`{name}` of `{capture.path}`")
        )

    def notes(self) -> list[str]:
        kept = list(dict.fromkeys(self.kept))
        notes = [
            f"--reduce {self.reduce} leaves {', '.join(kept)} as it is: no (N, C, H, W) or (N, L, C) map"
        ] * bool(kept)
        for count in sorted(set(self.prefixes.values())):
            names = [n for n, c in self.prefixes.items() if c == count]
            notes.append(f"--reduce {self.reduce} left out the first {count} token(s) of {', '.join(names)}")
        return notes


def cka_matrix(
    grams: Grams, left: Capture, rows: list[str], right: Capture | None, cols: list[str], unbiased: bool
) -> list[list[float | None]]:
    """CKA of every row layer with every column layer, one prepared Gram per layer."""
    ready_a = [cka.prepare(grams(left, r).matrix, unbiased) for r in rows]
    ready_b = ready_a if right is None else [cka.prepare(grams(right, c).matrix, unbiased) for c in cols]
    self_a = [cka.hsic(p, p) for p in ready_a]
    self_b = self_a if right is None else [cka.hsic(p, p) for p in ready_b]
    return [
        [cka.cka(p, q, self_a[i], self_b[j]) for j, q in enumerate(ready_b)] for i, p in enumerate(ready_a)
    ]


def rsa_matrix(
    grams: Grams,
    left: Capture,
    rows: list[str],
    right: Capture | None,
    cols: list[str],
    distance: str,
    method: str,
    rdm_only: bool,
    writing: claims.Claim,
) -> tuple[list[list[float | None]], list[Path]]:
    """The RDMs of every layer, staged as the folder ``rdm`` of the claimed one, and compared."""
    rdms_a = {r: rsa.rdm(grams(left, r), distance) for r in rows}
    rdms_b = rdms_a if right is None else {c: rsa.rdm(grams(right, c), distance) for c in cols}
    files = _write_rdms(writing, left, rdms_a, None if right is None else rdms_b)
    if rdm_only:
        return [], files
    grid = [[rsa.compare_rdms(rdms_a[r], rdms_b[c], method) for c in cols] for r in rows]
    return grid, files


def _write_rdms(
    writing: claims.Claim,
    left: Capture,
    rdms_a: dict[str, np.ndarray[Any, Any]],
    rdms_b: dict[str, Any] | None,
) -> list[Path]:
    """``rdm/<layer>.npy`` (B's under ``rdm/b/``) and ``rdm/inputs.json``, staged to replace the folder
    whole when the claim commits."""
    staged = writing.stage_folder(RDMS)
    folder = writing.path(RDMS)
    written: list[Path] = []
    try:
        if rdms_b is not None:
            (staged / "b").mkdir()
        for sub, rdms in (("", rdms_a), ("b", rdms_b or {})):
            for name, matrix in rdms.items():
                np.save(staged / sub / f"{name}.npy", matrix)
                written.append(folder / sub / f"{name}.npy")
        order = [{k: i.get(k) for k in ("path", "sha256")} for i in left.inputs]
        (staged / "inputs.json").write_text(json.dumps(order, indent=1) + "\n")
    except OSError as exc:
        raise from_environment(exc) or UsageError(
            f"Cannot write `{folder}`: {exc}", "Choose another --out."
        ) from exc
    return [*written, folder / "inputs.json"]
