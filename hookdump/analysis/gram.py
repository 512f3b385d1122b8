"""Gram matrices ``K = X X^T`` of a tensor's ``(N, features)`` view (each input's values flattened, or the
``(N, C)`` a ``--reduce``d capture holds), accumulated over chunks of the features so that the features are
never all in memory at once; and whether the ``N x N`` matrices fit in memory, said before any is made."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from ..store.folder.reader import Capture
from ..store.formats import nonfinite
from ..store.formats.npy import floats
from ..units import available_memory, human_bytes

CHUNK = 1 << 22  # values of X read at a time (32 MB in float64)


@dataclass
class Gram:
    """``matrix``: ``X X^T`` in float64; ``sums``: each row's sum; ``features``: the columns of X."""

    matrix: np.ndarray[Any, np.dtype[np.float64]]
    sums: np.ndarray[Any, np.dtype[np.float64]]
    features: int


def gram(capture: Capture, name: str, chunk: int = CHUNK) -> Gram:
    """The Gram matrix of tensor ``name`` of a capture (memory-mapped: read ``chunk`` values at a time)."""
    bits, bfloat16 = capture.bits(name)
    return gram_of(bits, bfloat16, chunk, f"`{name}` of `{capture.path}`")


def gram_of(array: np.ndarray[Any, Any], bfloat16: bool = False, chunk: int = CHUNK, what: str = "") -> Gram:
    """The Gram matrix of ``array`` (batch first) as ``(N, features)``, read ``chunk`` values (whole columns)
    at a time; ``bfloat16``: the array holds bfloat16 bits (``Capture.bits``)."""
    n = int(array.shape[0]) if array.ndim else 1
    x = array.reshape(n, -1)  # a view of the map: nothing read yet
    features = int(x.shape[1])
    matrix = np.zeros((n, n))
    sums = np.zeros(n)
    step = max(1, chunk // max(n, 1))
    for start in range(0, features, step):
        block = floats(x[:, start : start + step], bfloat16)
        if not np.isfinite(block).all():  # counted whole, to say how many: never compared away
            found = nonfinite.Count()
            for begin in range(0, features, step):
                found.add(floats(x[:, begin : begin + step], bfloat16))
            raise refusal(what, found)
        matrix += block @ block.T
        sums += block.sum(axis=1)
    return Gram(matrix, sums, features)


def refusal(what: str, found: nonfinite.Count) -> UsageError:
    """Why a tensor that holds NaN or Inf is not compared, with its counts (``what`` names it)."""
    return UsageError(
        f"{what or 'The tensor'} holds {found.text()}: its similarity is not defined.",
        "Leave it out with --layers (hookdump stats counts them in every tensor).",
    )


def check_fits(inputs: int, matrices: int, per_matrix: int = 2) -> None:
    """A UsageError when ``matrices`` Gram matrices of ``inputs`` x ``inputs`` float64 (and ``per_matrix``
    - 1 working copies of one) would take more than half the memory free now."""
    need = (matrices + per_matrix) * inputs * inputs * 8
    free = available_memory()
    if need > free // 2:
        most = int(math.sqrt(free // 2 / 8 / (matrices + per_matrix)))
        raise UsageError(
            f"{matrices} Gram matrices of {inputs} x {inputs} inputs need {human_bytes(need)}; this machine"
            f" has {human_bytes(free)} free.",
            f"Compare fewer layers at a time (--layers), or a capture of at most about {most:,} inputs.",
        )
