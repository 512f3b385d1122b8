"""The ranking of ``hookdump top``: the best k inputs of each channel found in one streamed pass over a
tensor (a running top-k, one input's maps read at a time: the tensor is never loaded), by its map's maximum
or mean, or (an ``(N, C)`` tensor) by the value itself; an input whose score is NaN or infinite left out."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..pictures.maps import feature_maps
from ..pictures.windows import not_per_image
from ..store.folder.tensorfile import Loaded
from ..store.formats import nonfinite


def one_value_per_channel(loaded: Loaded) -> bool:
    """Whether the tensor is ``(N, C)``, one value per channel of each input, rather than maps."""
    shape = loaded.array.shape
    return len(shape) == 2 and 0 not in shape and not loaded.windows and not_per_image(loaded) is None


def running_top(
    loaded: Loaded,
    picked: list[int],
    k: int,
    by: str,
    vector: bool,
    excluded: dict[int, list[int]],
    found: nonfinite.Count,
) -> tuple[np.ndarray[Any, Any], ...]:
    """One pass over the inputs: the best ``k`` (value, input index) per channel, ties to the first input
    (a slot no finite score filled holds -inf); ``vector``: each channel's value is the entry itself. An
    input whose score is NaN or infinite is not ranked in that channel: ``excluded[channel]`` lists it;
    ``found`` counts the NaN and Inf of every value read."""
    rows = np.array(picked)
    value = np.full((len(picked), 0), -np.inf)
    index = np.zeros((len(picked), 0), np.int64)
    batch: list[np.ndarray[Any, Any]] = []
    start = 0
    for i in range(loaded.count):
        if vector:
            score = loaded.image(i)[rows].astype(np.float64)
            found.add(score)
        else:
            maps = feature_maps(loaded, i).maps[rows].reshape(len(picked), -1).astype(np.float64)
            found.add(maps)
            with np.errstate(all="ignore"):  # inf - inf in a mean: NaN, said below
                score = maps.max(axis=1) if by == "max" else maps.mean(axis=1)
        for row in np.flatnonzero(~np.isfinite(score)):  # not ranked: said, never dropped silently
            excluded.setdefault(picked[row], []).append(i)
        batch.append(np.where(np.isfinite(score), score, -np.inf))
        if len(batch) == 256 or i == loaded.count - 1:
            scores = np.stack(batch, axis=1)
            value = np.concatenate([value, scores], axis=1)
            index = np.concatenate(
                [index, np.arange(start, start + scores.shape[1])[None].repeat(len(picked), 0)], axis=1
            )
            order = np.lexsort((index, -value), axis=-1)[:, :k]
            value, index = np.take_along_axis(value, order, 1), np.take_along_axis(index, order, 1)
            start, batch = i + 1, []
    return value, index
