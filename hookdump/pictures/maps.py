"""A captured tensor as the ``(C, H, W)`` maps of one image, read the way the capture says it is laid out.

* ``(N, C, H, W)``: the maps as they are. When the manifest records ``"layout": "NHWC"`` (timm's Swin
  stages return ``(N, H, W, C)``), the last axis is the channels. Without a record the tensor is taken as
  NCHW: the layout is never guessed from the sizes.
* ``(N, L, C)`` tokens: the patch tokens read row-major as an ``h x h`` grid (ViT / Swin / Twins order).
  With the manifest's ``model.num_prefix_tokens`` (class, distillation, register tokens), that many tokens
  are dropped first (``L`` itself is used when it is a square and ``L - prefix`` is not); without it, ``L``
  or ``L - 1`` (a class token) must be a perfect square. Anything else is refused.
* ``windows`` (Swin's windows: ``per_image`` rows per image, as the manifest records): one image's windows
  put back on its map (:mod:`hookdump.windows`), or refused where the capture did not record where they lie.
* Vectors ``(N, K)``, other ranks and empty tensors hold no map: refused (:class:`NoMap`, exit 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import NoMap, UsageError
from ..store.folder.tensorfile import Array, Loaded
from ..store.formats import nonfinite
from .attnmaps import check_global, head_maps
from .windows import not_per_image, unwindow


@dataclass
class Maps:
    """The float32 maps ``(C, H, W)`` of one image (NaN / Inf kept) and how the tensor was read."""

    maps: Array
    layout: str


def check_index(count: int, index: int) -> None:
    """A UsageError unless image ``index`` is one of the ``count`` images the tensor holds."""
    if not 0 <= index < count:
        raise UsageError(
            f"--index {index} is out of range: the tensor holds {count} image(s).",
            f"Use --index 0 to {count - 1}, or --index all." if count > 1 else "Use --index 0.",
        )


def feature_maps(loaded: Loaded, index: int) -> Maps:
    """The maps of image ``index`` of ``loaded`` (see the module docstring)."""
    shape = tuple(int(n) for n in loaded.array.shape)
    if math.prod(shape) == 0:
        raise NoMap(
            f"`{loaded.source}` holds an empty tensor of shape {shape}: there is nothing to draw.",
            "A dimension of size 0 comes from an empty batch or a zero-sized output; show a layer whose"
            " output has values (`hookdump list-modules` shows the output shapes).",
        )
    if loaded.layout == "attn":
        return _attention(loaded, shape, index)
    if loaded.windows:
        check_index(loaded.count, index)
        maps, how = unwindow(loaded, index)
        return Maps(maps, how)
    if (refused := not_per_image(loaded)) is not None:
        raise refused
    if len(shape) not in (3, 4):
        what = "a vector per image" if len(shape) == 2 else f"{len(shape)} dimensions"
        raise NoMap(
            f"A tensor of shape {shape} ({what}) has no spatial map to draw.",
            "show draws (N, C, H, W) feature maps and (N, L, C) tokens on a square grid; pick a layer whose"
            " output is spatial (`hookdump list-modules` shows the output shapes).",
        )
    check_index(loaded.count, index)
    item = loaded.image(index)
    if len(shape) == 4:
        if loaded.layout == "NHWC":
            return Maps(item.transpose(2, 0, 1), f"{shape[3]} maps of {shape[1]}x{shape[2]}, channels last"
                        " (NHWC, as the capture recorded)")  # fmt: skip
        return Maps(item, f"{shape[1]} maps of {shape[2]}x{shape[3]}")
    return _tokens(item, shape, loaded.prefix_tokens)


def _attention(loaded: Loaded, shape: tuple[int, ...], index: int) -> Maps:
    """Attention weights ``(N, heads, L, S)`` -> one map per head over the patch grid (:mod:`attnmaps`)."""
    check_global(shape, loaded.images, loaded.windows)
    check_index(loaded.count, index)
    prefix = loaded.prefix_tokens or 0
    maps = head_maps(loaded.image(index), prefix, loaded.class_token).astype(np.float32)
    side = f"{maps.shape[1]}x{maps.shape[2]}"
    if loaded.class_token:
        how = f"the class token's attention to the {side} patches ({prefix} prefix token(s) left out)"
    else:
        how = f"the attention each of the {side} key patches receives, averaged over the patch queries"
    return Maps(maps, f"{shape[1]} heads: {how}")


def _tokens(item: Array, shape: tuple[int, ...], prefix: int | None) -> Maps:
    """``(L, C)`` tokens -> ``(C, h, h)`` maps, dropping the prefix tokens (see the module docstring)."""
    tokens, channels = shape[1], shape[2]
    for drop in (prefix, 0) if prefix is not None else (0, 1):
        side = math.isqrt(max(tokens - drop, 0))
        if tokens > drop and side * side == tokens - drop:
            maps = np.ascontiguousarray(item[drop:].T).reshape(channels, side, side)
            if drop and prefix is not None:
                why = f" (first {drop} token(s) dropped: the prefix tokens the capture recorded)"
            else:
                why = " (first token dropped: a class token)" if drop else ""
            return Maps(maps, f"{tokens} tokens of {channels} channels as a {side}x{side} grid{why}")
    if prefix is not None:
        raise NoMap(
            f"A tensor of shape {shape}: {tokens} tokens less the {prefix} prefix token(s) the capture"
            " recorded are not a square grid (nor are all of them).",
            "show reshapes (N, L, C) tokens on a square grid; reshape this one yourself.",
        )
    raise NoMap(
        f"A tensor of shape {shape}: {tokens} tokens are not a square grid (nor a class token plus one).",
        "show reshapes (N, L, C) tokens when L or L-1 is a perfect square, or L less the prefix tokens"
        " the manifest records (model.num_prefix_tokens); reshape this one yourself.",
    )


def to_unit(values: Array, axes: tuple[int, ...] | None) -> tuple[Array, Array, Array, Array]:
    """Min-max scaled to 0..1 over ``axes`` (None: all), finite values only; NaN where not finite.

    Returns the scaled values, the lows, the highs, and where the range is empty (constant: drawn 0).
    """
    finite = np.isfinite(values)
    low = np.where(finite, values, np.inf).min(axis=axes, keepdims=True)
    high = np.where(finite, values, -np.inf).max(axis=axes, keepdims=True)
    flat = ~(high > low)
    low = np.where(np.isfinite(low), low, 0.0)
    span = np.where(flat, 1.0, high - low)
    unit = np.where(finite, np.clip((values - low) / span, 0.0, 1.0) * ~flat, np.nan)
    return unit.astype(np.float32), low, high, flat


def no_finite(values: Array) -> Array:
    """Which maps (the first axis) hold no finite value at all: drawn all magenta, neither constant nor
    flat."""
    return np.asarray(~np.isfinite(values).reshape(len(values), -1).any(axis=1))


def describe_nonfinite(name: str, values: Array, how: str) -> list[str]:
    """A note when ``values`` hold NaN or Inf, saying how they are drawn."""
    return nonfinite.note(name, nonfinite.count(values), how)
