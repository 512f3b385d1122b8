"""Attention weights as maps over the image: what the class token looks at, per head, and the attention
rollout across layers (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"). numpy only.

Inputs are one image's attention, ``(heads, L, S)`` (queries x keys, rows summing to 1), as ``capture
--attention`` saves it per image. The first ``prefix`` tokens (class, distillation, register tokens: timm's
``num_prefix_tokens``, recorded by capture) are not patches; the patches after them lie row-major on a
square grid.

* With a class token (timm's ``cls_token``, first of the prefix tokens), a head's map is its class-token row
  over the patch keys.
* Without one (Twins, PVT; ViTs with only register tokens), a head's map is the attention each patch key
  receives, averaged over the patch queries; with spatial reduction (keys on a coarser grid than the
  queries) the keys' grid is used.
* Rollout: per layer, the mean over heads plus the identity (the residual path), rows renormalised, then the
  product through the layers, first layer rightmost: ``R = A_L ... A_1``. The map is R's class-token row
  over the patches (or, without a class token, the mean of the patches' rows).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import NoMap

_WINDOWED = (
    "Attention of shape {shape} is not one image's attention over the whole image: {why}. show draws"
    " global attention (N, heads, L, L), as ViT, DeiT, BEiT and EVA blocks save it."
)


def grid_side(tokens: int, what: str) -> int:
    """The side of the square grid ``tokens`` patches lie on; refused when they do not make one."""
    side = math.isqrt(max(tokens, 0))
    if tokens <= 0 or side * side != tokens:
        raise NoMap(
            f"{tokens} {what} do not lie on a square grid.",
            "Capture at a square --input-size, or check the model's num_prefix_tokens in the manifest.",
        )
    return side


def check_global(shape: tuple[int, ...], images: int | None, windows: dict[str, Any] | None = None) -> None:
    """Refuse what is not ``(N, heads, L, S)`` attention of whole images: Swin's windows (``N * windows``
    rows for ``images`` images, ``windows`` as the manifest records them), Twins' locally-grouped windows
    (five axes), anything else."""
    if len(shape) == 5:
        why = (
            f"it is attention within local windows, (N, windows, heads, w*w, w*w): {shape[1]} windows of"
            f" {shape[3]} tokens per image (Twins' LocallyGroupedAttn)"
        )
        raise NoMap(
            _WINDOWED.format(shape=shape, why=why),
            "Pick a global-attention layer (Twins: the odd blocks of a stage, GlobalSubSampleAttn, e.g."
            " blocks.0.1.attn).",
        )
    if len(shape) != 4:
        raise NoMap(
            f"A tensor of shape {shape} is not attention weights (N, heads, L, S).",
            "Pass a <module>.attn file written by capture --attention (without --reduce).",
        )
    per_image = int(windows["per_image"]) if windows else None
    if per_image or (images is not None and shape[0] != images):
        rows = f"{per_image} windows per image" if per_image else f"{shape[0]} rows for {images} image(s)"
        why = f"its first axis holds {rows} (windows, as in Swin)"
        raise NoMap(_WINDOWED.format(shape=shape, why=why), "Pick a global-attention layer.")


def head_maps(attn: np.ndarray, prefix: int, class_token: bool = True) -> np.ndarray:
    """``(heads, h, w)``: what the class token attends to per head (see the module docstring)."""
    heads, queries, keys = attn.shape
    if prefix and class_token:
        side = grid_side(keys - prefix, f"patch tokens (of {keys}, after {prefix} prefix tokens)")
        return attn[:, 0, prefix:].reshape(heads, side, side)
    patches = keys - prefix if queries == keys else keys  # queries == keys: self-attention, same tokens
    side = grid_side(patches, "key tokens" if prefix == 0 else f"patch tokens (after {prefix} prefix tokens)")
    received: np.ndarray = attn[:, prefix:, keys - patches :].mean(axis=1)
    return received.reshape(heads, side, side)


def rollout(layers: list[np.ndarray], prefix: int, class_token: bool = True) -> np.ndarray:
    """``(h, w)``: the rollout of one image's attention through ``layers`` (each ``(heads, L, L)``)."""
    tokens = layers[0].shape[-1]
    for attn in layers:
        if attn.shape[1] != attn.shape[2] or attn.shape[2] != tokens:
            raise NoMap(
                f"Rollout multiplies square (L, L) attention of one token count through the layers; got"
                f" {[tuple(a.shape) for a in layers]}.",
                "Pass the attention of blocks of one stage (e.g. capture -l 'blocks.*.attn' --attention).",
            )
    result = np.eye(tokens)
    for attn in layers:
        mixed = attn.mean(axis=0) + np.eye(tokens)
        result = (mixed / mixed.sum(axis=1, keepdims=True)) @ result
    row: np.ndarray = result[0] if prefix and class_token else result[prefix:].mean(axis=0)
    side = grid_side(tokens - prefix, f"patch tokens (of {tokens}, after {prefix} prefix tokens)")
    return row[prefix:].reshape(side, side)
