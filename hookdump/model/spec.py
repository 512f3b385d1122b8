"""Which model a command asks for, and under which name it is built: shared by every source and command."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

DEFAULT_MODEL = "alt_gvt_large"
SEED_MAX = 2**64 - 1  # torch.manual_seed's range


@dataclass(frozen=True)
class ModelSpec:
    """Which model to build, with which arguments and weights; shared by every command.

    Attributes:
        name: a timm name, a Twins alias, ``tv:NAME`` (torchvision), or ``module:CLASS`` for ``module``.
        model_args: keyword arguments for ``timm.create_model`` (``{"num_classes": 10}``), or torchvision's
            ``get_model`` for ``tv:NAME``.
        module: an ``nn.Module`` of the caller's (the API's ``model=``): hookdump runs copies of it, never it.
        transform: the caller's eval transform for ``module`` (a PIL image to a ``(C, H, W)`` float tensor).
    """

    name: str = DEFAULT_MODEL
    imports: tuple[str, ...] = ()
    checkpoint: Path | None = None
    pretrained: bool = False
    name_given: bool = True
    seed: int = 0  # random weights are drawn from this seed, so a run without trained weights repeats
    model_args: Mapping[str, Any] = field(default_factory=dict)
    module: nn.Module | None = None
    transform: Callable[[Any], torch.Tensor] | None = None


@dataclass
class ResolvedName:
    """A requested model name and the timm name it builds (None outside timm), with what to tell the user."""

    requested: str
    timm_name: str | None
    notes: list[str] = field(default_factory=list)
