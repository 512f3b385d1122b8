"""The meta device made fast: build without running weight init, trace shapes without Python decompositions.

On ``meta`` a tensor has a shape and no storage. Two things still cost time there: timm's weight init
(``trunc_normal_`` and friends are decomposed op by op in Python, for nothing: there are no values), and a
few ops whose meta kernels are Python decompositions (``layer_norm``, ``linear``, ``gelu``, ``softmax``).
Both are torch-function modes, active only for as long as hookdump builds or traces on meta. A third,
``SkipInit``, builds a real model without weight init when a checkpoint will fill every parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

#: In-place ops that change a tensor's metadata (shape, strides, flags) rather than its values: these run.
_METADATA_OPS = frozenset(
    {
        "requires_grad_",
        "resize_",
        "resize_as_",
        "set_",
        "squeeze_",
        "unsqueeze_",
        "transpose_",
        "t_",
        "swapdims_",
        "swapaxes_",
        "as_strided_",
        "detach_",
        "share_memory_",
        "rename_",
        "refine_names_",
        "retain_grad",
    }
)


def _is_meta(args: tuple[Any, ...]) -> bool:
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].is_meta


class SkipValueWrites(TorchFunctionMode):
    """Skip in-place writes of *values* into meta tensors (weight init): they have no values to write."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and name not in _METADATA_OPS and _is_meta(args):
            return args[0]
        return func(*args, **(kwargs or {}))


def _layer_norm(x: torch.Tensor, normalized_shape: Any, *args: Any, **kwargs: Any) -> torch.Tensor | None:
    trailing = tuple(x.shape[-len(tuple(normalized_shape)) :]) if tuple(normalized_shape) else ()
    if trailing != tuple(normalized_shape):
        return None  # let the real op raise its own error
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _linear(x: torch.Tensor, weight: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor | None:
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        return None
    return torch.empty((*x.shape[:-1], weight.shape[0]), dtype=x.dtype, device="meta")


def _same_shape(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return torch.empty_like(x)


def _softmax(x: torch.Tensor, *args: Any, dtype: torch.dtype | None = None, **kwargs: Any) -> torch.Tensor:
    return torch.empty(x.shape, dtype=dtype or x.dtype, device="meta")


_SHAPE_RULES: dict[Any, Callable[..., torch.Tensor | None]] = {
    F.layer_norm: _layer_norm,
    F.linear: _linear,
    F.gelu: _same_shape,
    F.softmax: _softmax,
    torch.softmax: _softmax,
    torch.Tensor.softmax: _softmax,
}


class FastShapes(TorchFunctionMode):
    """Output shapes of a few costly ops computed directly, without running their meta decompositions."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        rule = _SHAPE_RULES.get(func)
        if rule is not None and _is_meta(args):
            out = rule(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


class SkipInit(TorchFunctionMode):
    """Skip in-place writes of values into parameters, their ``.data`` and views (weight init, including
    reset_parameters); all else runs: non-persistent buffers are computed as always."""

    def __init__(self) -> None:
        super().__init__()
        self.aliases: dict[int, torch.Tensor] = {}  # kept alive while building, so their ids stay unique

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        first: Any = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes `tensor=` by keyword
        if not isinstance(first, nn.Parameter) and id(first) not in self.aliases:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and name not in _METADATA_OPS:
            return first
        out, storage = func(*args, **kwargs), first.untyped_storage().data_ptr()
        if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr() == storage:
            self.aliases[id(out)] = out  # `.data`, a view, a detach(): writes into it are writes into `first`
        return out
