"""Representational similarity analysis (Kriegeskorte et al. 2008): a representational dissimilarity matrix
(RDM) per layer, from the same Gram matrices as CKA (correlation distance, ``1 - r`` of two inputs' patterns,
or the Euclidean distance), and two RDMs compared by Spearman's rho or Kendall's tau-a on their upper
triangles. The figures are rsatoolbox's (``calc_rdm``, ``compare``) but for its ``euclidean``, which is
the squared distance over the features: the test checks both."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import check_choice
from .gram import Gram

Matrix = np.ndarray[Any, np.dtype[np.float64]]
DISTANCES = ("correlation", "euclidean")
COMPARISONS = ("spearman", "tau-a")


def rdm(g: Gram, distance: str = "correlation") -> Matrix:
    """The ``N x N`` RDM of one layer, from its Gram matrix and row sums."""
    check_choice("--distance", distance, DISTANCES)
    k = g.matrix
    diagonal = np.diag(k).copy()
    if distance == "euclidean":
        squared = diagonal[:, None] + diagonal[None, :] - 2.0 * k
        out: Matrix = np.sqrt(np.maximum(squared, 0.0))
    else:
        mean = g.sums / g.features
        cov = k / g.features - np.outer(mean, mean)
        var = np.maximum(np.diag(cov).copy(), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = 1.0 - cov / np.sqrt(np.outer(var, var))  # a constant pattern: NaN, as rsatoolbox's
    np.fill_diagonal(out, 0.0)
    return out


def upper(matrix: Matrix) -> Matrix:
    """The upper triangle, row by row (``i < j``): the vector rsatoolbox keeps of an RDM."""
    i, j = np.triu_indices(matrix.shape[0], k=1)
    vector: Matrix = matrix[i, j]
    return vector


def ranks(v: Matrix) -> Matrix:
    """Ranks from 1, ties given their mean rank (``scipy.stats.rankdata``'s default)."""
    order = np.argsort(v, kind="mergesort")
    ordered = v[order]
    new = np.r_[True, ordered[1:] != ordered[:-1]]
    group = np.cumsum(new) - 1
    starts = np.flatnonzero(np.r_[new, True])
    mean_rank = (starts[:-1] + starts[1:] - 1) / 2.0 + 1.0
    out = np.empty(len(v))
    out[order] = mean_rank[group]
    return out


def _pearson(x: Matrix, y: Matrix) -> float | None:
    x, y = x - x.mean(), y - y.mean()
    norm = float(np.sqrt((x @ x) * (y @ y)))
    return float(x @ y) / norm if norm > 0 else None


def _ties(v: Matrix) -> int:
    """Pairs of equal values."""
    counts = np.unique(v, return_counts=True)[1].astype(np.int64)
    return int((counts * (counts - 1) // 2).sum())


def _inversions(y: Matrix) -> int:
    """Pairs ``i < j`` with ``y[i] > y[j]``, strictly: bit by bit of the values' ranks, in each group of
    values that agree on the higher bits, the ones with this bit set before ones without it (numpy only,
    O(n log^2 n))."""
    rank = np.unique(y, return_inverse=True)[1].astype(np.int64).ravel()
    count = 0
    for bit in range(max(int(rank.max()).bit_length(), 1) - 1, -1, -1) if len(rank) else ():
        group = rank >> (bit + 1)
        order = np.argsort(group, kind="stable")
        g, b = group[order], (rank[order] >> bit) & 1
        ones = np.cumsum(b)
        start = np.r_[True, g[1:] != g[:-1]]
        first = np.maximum.accumulate(np.where(start, np.arange(len(g)), 0))
        before = ones - (ones[first] - b[first])  # ones in this group up to here
        count += int(before[b == 0].sum())
    return count


def tau_a(x: Matrix, y: Matrix) -> float | None:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs (Knight's algorithm)."""
    n = len(x)
    pairs = n * (n - 1) // 2
    if pairs == 0:
        return None
    order = np.lexsort((y, x))  # by x, ties by y: tied x then never counts as discordant
    discordant = _inversions(y[order])
    tied_x, tied_y = _ties(x), _ties(y)
    joint = _joint_ties(x, y)
    concordant = pairs - tied_x - tied_y + joint - discordant
    return (concordant - discordant) / pairs


def _joint_ties(x: Matrix, y: Matrix) -> int:
    both = np.unique(np.stack([x, y], axis=1), axis=0, return_counts=True)[1].astype(np.int64)
    return int((both * (both - 1) // 2).sum())


def compare_rdms(a: Matrix, b: Matrix, method: str = "spearman") -> float | None:
    """Two RDMs of the same inputs compared on their upper triangles; None when not defined (a constant
    RDM, or a NaN in either: a layer constant over some input)."""
    check_choice("--method", method, COMPARISONS)
    x, y = upper(a), upper(b)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return None
    if method == "spearman":
        return _pearson(ranks(x), ranks(y))
    return tau_a(x, y)
