"""Walk a module's structured output (tuples, lists, dicts, dataclasses) down to its leaves."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch


def has_tensor(obj: Any) -> bool:
    """Whether a tensor sits anywhere inside ``obj``."""
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, (tuple, list)):
        return any(has_tensor(x) for x in obj)
    if isinstance(obj, Mapping):
        return any(has_tensor(x) for x in obj.values())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return any(has_tensor(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    return False


def leaves(obj: Any, index: str | None = None) -> list[tuple[str | None, Any]]:
    """``(index, leaf)`` pairs: index None for a bare tensor, ``"1"`` / ``"logits"`` / ``"1.0"`` inside.

    A branch that holds no tensor (e.g. the ``(H, W)`` size tuple Twins returns) is one leaf.
    """
    if isinstance(obj, torch.Tensor) or not has_tensor(obj):
        return [(index, obj)]
    if isinstance(obj, (tuple, list)):
        items: list[tuple[str, Any]] = [(str(i), x) for i, x in enumerate(obj)]
    elif isinstance(obj, Mapping):
        items = [(str(k), v) for k, v in obj.items()]
    else:
        items = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    found: list[tuple[str | None, Any]] = []
    for key, value in items:
        found.extend(leaves(value, key if index is None else f"{index}.{key}"))
    return found


def tensor_shapes(obj: Any) -> list[list[int]]:
    """Shapes of every tensor leaf of an output, in order."""
    return [list(leaf.shape) for _, leaf in leaves(obj) if isinstance(leaf, torch.Tensor)]
