"""Attention maps and rollout, against numpy computed by hand (the CLI path is in test_pictures_attention)."""

from __future__ import annotations

import numpy as np
import pytest

from hookdump.errors import NoMap
from hookdump.pictures import attnmaps


def _softmax_rows(rng: np.random.Generator, heads: int, tokens: int) -> np.ndarray:
    logits = rng.normal(size=(heads, tokens, tokens))
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def test_rollout_of_identity_attention_is_uniform() -> None:
    """Every token attends only to itself: nothing flows between patches, so no patch stands out."""
    identity = np.stack([np.eye(17)] * 3)
    for prefix in (0, 1):
        tokens = 17 if prefix else 16
        layers = [identity[:, :tokens, :tokens]] * 4
        flat = attnmaps.rollout(layers, prefix)
        # by hand: the product of identities is the identity; the class token's row gives every patch 0,
        # and without a class token the mean of the patches' rows gives each patch 1/16
        np.testing.assert_array_equal(flat, np.full((4, 4), 0.0 if prefix else 1 / 16))


def test_rollout_of_uniform_attention_is_uniform() -> None:
    uniform = np.full((2, 10, 10), 0.1)
    got = attnmaps.rollout([uniform, uniform], prefix=1)
    # by hand: each mixed row is 0.55 on itself and 0.05 elsewhere; two layers give the class token
    # 0.55 * 0.05 + 0.05 * 0.55 + 8 * 0.05 * 0.05 = 0.075 on every patch
    np.testing.assert_allclose(got, np.full((3, 3), 0.075), rtol=1e-12)


def test_rollout_equals_the_product_written_out_by_hand() -> None:
    rng = np.random.default_rng(0)
    layers = [_softmax_rows(rng, 3, 5) for _ in range(3)]
    expected = np.eye(5)
    for attn in layers:  # Abnar & Zuidema: 0.5 A + 0.5 I, rows renormalised, multiplied layer after layer
        a = np.zeros((5, 5))
        for i in range(5):
            for j in range(5):
                a[i, j] = 0.5 * sum(attn[h, i, j] for h in range(3)) / 3 + 0.5 * (i == j)
        expected = a @ expected
    np.testing.assert_allclose(attnmaps.rollout(layers, prefix=1), expected[0, 1:].reshape(2, 2), rtol=1e-12)


def test_head_maps_are_the_class_row_over_the_patches_after_every_prefix_token() -> None:
    rng = np.random.default_rng(1)
    attn = _softmax_rows(rng, 2, 1 + 4 + 9)  # a class token, 4 registers, a 3x3 grid
    maps = attnmaps.head_maps(attn, prefix=5)
    assert maps.shape == (2, 3, 3)
    for head in range(2):
        for row in range(3):
            for col in range(3):
                assert maps[head, row, col] == attn[head, 0, 5 + 3 * row + col]


def test_without_a_class_token_a_map_is_the_attention_each_key_receives() -> None:
    rng = np.random.default_rng(2)
    attn = rng.random((2, 16, 4))  # 16 queries, keys on a coarser 2x2 grid (spatial reduction)
    maps = attnmaps.head_maps(attn, prefix=0)
    np.testing.assert_allclose(maps[1, 1, 0], attn[1, :, 2].mean())


def test_windowed_and_non_square_attention_are_refused_with_the_reason() -> None:
    with pytest.raises(NoMap, match="windows"):
        attnmaps.check_global((64, 3, 49, 49), images=1)
    with pytest.raises(NoMap, match="square grid"):
        attnmaps.head_maps(np.zeros((1, 11, 11)), prefix=1)
    with pytest.raises(NoMap, match="one token count"):
        attnmaps.rollout([np.zeros((1, 5, 5)), np.zeros((1, 10, 10))], prefix=1)
