"""Linear CKA (Kornblith et al. 2019) from Gram matrices: the HSIC of two layers' Grams, normalised by each
one's with itself. Unbiased by default: Song et al. (2012)'s estimator of HSIC, near 0 for independent
representations at any N (the classic, biased one is not, for N not far above the features); ``biased``:
the classic ``tr(KHLH) / (n - 1)^2``. Each Gram is prepared once, so a pair costs one ``N^2`` dot product."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError

Matrix = np.ndarray[Any, np.dtype[np.float64]]


@dataclass
class Prepared:
    """A Gram matrix made ready for HSIC: unbiased, its diagonal zeroed with its row sums and total;
    biased, double-centred (``HKH``)."""

    matrix: Matrix
    rows: Matrix
    total: float
    unbiased: bool


def prepare(gram: Matrix, unbiased: bool = True) -> Prepared:
    """``gram`` (changed in place: no copy of ``N x N``) made ready for :func:`hsic`."""
    n = gram.shape[0]
    if unbiased and n < 4:
        raise UsageError(
            f"The unbiased CKA needs at least 4 inputs; these captures hold {n}.",
            "Capture more images, or pass --biased for the classic estimator.",
        )
    if unbiased:
        np.fill_diagonal(gram, 0.0)
        rows = gram.sum(axis=1)
        return Prepared(gram, rows, float(rows.sum()), True)
    means = gram.mean(axis=0)
    gram -= means[None, :]
    gram -= gram.mean(axis=1)[:, None]
    return Prepared(gram, means, 0.0, False)


def hsic(k: Prepared, m: Prepared) -> float:
    """HSIC of two prepared Grams of the same inputs (Song et al. 2012, eq. 5; or the biased form)."""
    n = k.matrix.shape[0]
    trace = float(np.dot(k.matrix.ravel(), m.matrix.ravel()))  # tr(K L) for symmetric K, L
    if not k.unbiased:
        return float(trace / (n - 1) ** 2)
    rest = k.total * m.total / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * float(k.rows @ m.rows)
    return float((trace + rest) / (n * (n - 3)))


def cka(k: Prepared, m: Prepared, self_k: float, self_m: float) -> float | None:
    """CKA from the pair's HSIC and each one's with itself; None when either of those is not positive
    (a layer whose values do not vary over the inputs)."""
    if self_k <= 0 or self_m <= 0:
        return None
    return hsic(k, m) / math.sqrt(self_k * self_m)
