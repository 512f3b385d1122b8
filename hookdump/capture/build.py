"""The model the API was given, as a ``ModelSpec`` (a name, a spec or a module of the caller's), and a build
run at most once (the meta model and the real one, which the preflight and the run share)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..model.sources import module as module_source
from ..model.spec import ModelSpec

T = TypeVar("T")
#: A model as the API takes it: a name (timm, a Twins alias, ``tv:NAME``), a ``ModelSpec``, or a module.
Model = ModelSpec | str | torch.nn.Module
#: A caller's eval transform: a PIL image to a ``(C, H, W)`` float tensor.
Transform = Callable[[Any], torch.Tensor]


def model_spec(model: Model, transform: Transform | None = None) -> ModelSpec:
    """The ``ModelSpec`` of what the API was given (``transform``: the eval transform, for any source)."""
    if isinstance(model, torch.nn.Module):
        return module_source.spec_for(model, transform)
    spec = ModelSpec(model) if isinstance(model, str) else model
    return spec if transform is None else dataclasses.replace(spec, transform=transform)


def once(build: Callable[[], T]) -> Callable[[], T]:
    """``build`` run at most once: later calls return the same result, or raise the same error."""
    memo: list[T] = []
    failed: list[Exception] = []

    def wrapper() -> T:
        if failed:
            raise failed[0]
        if not memo:
            try:
                memo.append(build())
            except Exception as exc:
                failed.append(exc)
                raise
        return memo[0]

    return wrapper
