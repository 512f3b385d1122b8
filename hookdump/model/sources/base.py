"""What every model source gives the rest of hookdump (``Source``): the small interface each module of
``model/sources/`` implements, so that layer specs, the inventory, the hooks and the store never ask where a
model came from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ..spec import ResolvedName


def unfused_attention(model: nn.Module, unfused: int, found: dict[str, str]) -> str:
    """What ``--attention`` did to a model whose attention modules carry timm's ``fused_attn`` switch."""
    return (
        f"--attention: fused attention turned off in {unfused} module(s) (the same math, step by step); the"
        f" weights of {len(found)} attention module(s) are saved as <module>.attn"
    )


def no_preprocessing(needed: tuple[str, ...]) -> tuple[dict[str, Any] | None, list[str]]:
    """No eval transform of the source's own: timm's data config of the model (its ``pretrained_cfg``)."""
    return None, []


@dataclass
class Source:
    """One model, whatever it comes from.

    Attributes:
        name: the name as requested and its timm name (None outside timm), with notes for the user.
        build_meta: the model on the meta device (raises where it cannot be built there).
        load: the real model with its weights, and what to say about them.
        check_weights: refuse weights that contradict or do not fit, given the meta model (or None).
        preprocess: the eval transform as a data config with a note, or None for timm's data config of
            the model (its ``pretrained_cfg``); takes what it must know (``input size``, ``mean``, ...).
        record: what the manifest's ``model`` says of the source beyond the timm keys.
        rerun: the ``model`` of the manifest's options (``--resume`` checks it).
        attention: what ``--attention`` did, given the model, the modules it unfused and the weights saved
            (``{weights child: attention module}``).
    """

    name: ResolvedName
    build_meta: Callable[[], nn.Module]
    load: Callable[[], tuple[nn.Module, list[str]]]
    check_weights: Callable[[nn.Module | None], None]
    preprocess: Callable[[tuple[str, ...]], tuple[dict[str, Any] | None, list[str]]]
    record: dict[str, Any] = field(default_factory=dict)
    rerun: str = ""
    attention: Callable[[nn.Module, int, dict[str, str]], str] = unfused_attention
