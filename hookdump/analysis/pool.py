"""``compare --reduce``: a captured tensor pooled to ``(N, C)`` as ``capture --reduce`` pools it at hook time
(``capture/reduce.py``, in torch), here in numpy over the saved file: the spatial mean or max of
``(N, C, H, W)`` maps (``(N, H, W, C)`` where the manifest's layout is ``NHWC``) and of ``(N, L, C)`` tokens,
the prefix tokens left out where the token map holds the patches and the prefix (the manifest's
``model.num_patch_tokens`` and ``num_prefix_tokens``), or the class token (the first) of a token map. A
tensor with nothing to pool is left as it is, and said so; one that holds NaN or Inf is refused, with its
counts, as it is without ``--reduce``. Read a few inputs at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UsageError
from ..store.folder.reader import Capture
from ..store.formats import nonfinite
from ..store.formats.npy import floats
from .gram import refusal

REDUCTIONS = ("none", "mean", "max", "cls")
ROWS = 1 << 24  # values read at a time (128 MB in float64), whole inputs


def pool(
    x: np.ndarray[Any, Any], how: str, channels_last: bool = False, prefix: int = 0
) -> np.ndarray[Any, Any] | None:
    """``x`` (batch first, float64) pooled as ``how`` says, or None when there is nothing to pool (the rules
    of ``capture.reduce.reduce``)."""
    if how == "none" or x.ndim not in (3, 4):
        return None
    if how == "cls":
        return x[:, 0] if x.ndim == 3 else None
    if x.ndim == 3 and prefix:
        x = x[:, prefix:]
    axes = ((1, 2) if channels_last else (2, 3)) if x.ndim == 4 else (1,)
    pooled: np.ndarray[Any, Any] = x.mean(axis=axes) if how == "mean" else x.max(axis=axes)
    return pooled


def prefix_of(shape: tuple[int, ...], how: str, model: dict[str, Any]) -> int:
    """The prefix tokens a mean or max leaves out of a token map of ``shape`` (``capture.reduce.prefix_of``):
    the model's, when the map holds its patches and its prefix."""
    prefix, patches = model.get("num_prefix_tokens"), model.get("num_patch_tokens")
    if how not in ("mean", "max") or len(shape) != 3 or not isinstance(prefix, int) or prefix <= 0:
        return 0
    if "num_patch_tokens" not in model:  # a capture from before the patches were recorded
        return prefix if shape[1] > prefix else 0
    return prefix if isinstance(patches, int) and shape[1] == patches + prefix else 0


def reduced(
    capture: Capture, name: str, how: str, kept: list[str], prefixes: dict[str, int]
) -> np.ndarray[Any, Any] | None:
    """Tensor ``name`` of ``capture`` as ``(N, C)``, pooled as ``how`` says, read a few inputs at a time;
    None (its name added to ``kept``) when it has nothing to pool; the prefix tokens left out in
    ``prefixes``. A windowed tensor (several rows per image) is refused, as ``capture --reduce`` is."""
    entry = capture.entries[name]
    if entry.get("windows"):
        raise UsageError(
            f"--reduce {how} pools each row, and `{name}` holds several rows (windows) per image.",
            f"Compare `{name}` without --reduce, or a layer after the windows are merged.",
        )
    bits, bfloat16 = capture.bits(name)
    shape = tuple(int(n) for n in bits.shape)
    model = capture.manifest.get("model") or {}
    prefix = prefix_of(shape, how, model)
    per_input = max(1, int(np.prod(shape[1:], dtype=np.int64)))
    step = max(1, ROWS // per_input)
    parts = []
    found = nonfinite.Count()  # of the tensor's values, not the pooled ones: named as gram_of names them
    for start in range(0, shape[0], step):
        values = floats(bits[start : start + step], bfloat16)
        found.add(values)
        with np.errstate(all="ignore"):  # a NaN, inf - inf: refused below, never printed
            part = pool(values, how, entry.get("layout") == "NHWC", prefix)
        if part is None:
            kept.append(name)
            return None
        parts.append(part)
    if found:
        raise refusal(f"`{name}` of `{capture.path}`", found)
    if prefix:
        prefixes[name] = prefix
    return np.concatenate(parts)
