"""Which axis of a captured map holds the channels, from the module that made it, not from the shape.

timm runs most models channels-first, ``(N, C, H, W)``, but some keep their stages channels-last,
``(N, H, W, C)`` (Swin, Swin V2, MambaOut: the model's ``output_fmt`` is ``"NHWC"``), and ConvNeXt blocks
switch to channels-last between their depthwise conv and their MLP. A shape alone cannot tell
``(1, 56, 56, 96)`` from ``(1, 96, 56, 56)`` reliably, but the module can:

* a 2-D conv, batch norm, pooling or any ``*2d`` module (``LayerNorm2d``, ``BatchNormAct2d``) is
  channels-first;
* ``nn.Linear`` and ``nn.LayerNorm`` act on the last axis, so a 4-D output of theirs is channels-last, and so
  is a module all of whose parametrised parts are linear layers and layer norms (a ``Mlp``, a Swin block);
* a module without parameters (an activation, ``Identity``, dropout) follows the module around it;
* anything else follows the model's ``output_fmt`` (channels-first when it has none).

The layout names a tensor's axes, as recorded in the manifest: ``NCHW``, ``NHWC``, ``NLC`` (tokens),
``NCL`` (1-D convs), ``NC`` (vectors, and pooled ``--reduce`` maps), ``attn`` (``(N, heads, L, L)``), and
``windows``: a first axis of several rows per image (Swin's and DaViT's window attention,
``(N * windows, w*w, C)``), told by the batch-of-one trace, whose first axis is then the rows per image. Such
a tensor (and windowed ``attn``) gets a ``windows`` record: ``per_image``, and where the enclosing block says
(Swin: ``window_size``, ``shift_size``, ``input_resolution``) the window ``size``, the ``map`` and ``shift``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import UsageError

_CHANNELS_FIRST = (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.GroupNorm, nn.InstanceNorm2d,
                   nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)  # fmt: skip
_LAST_AXIS = (nn.Linear, nn.LayerNorm)
_CHANNELS_FIRST_1D = (nn.Conv1d, nn.BatchNorm1d, nn.MaxPool1d, nn.AvgPool1d)


def channels_last_paths(model: nn.Module, paths: list[str]) -> set[str]:
    """Those of ``paths`` whose 4-D outputs are ``(N, H, W, C)``."""
    modules = dict(model.named_modules())
    model_last = getattr(model, "output_fmt", "NCHW") == "NHWC"
    return {path for path in paths if path in modules and _last(path, modules, model_last)}


def _last(path: str, modules: dict[str, nn.Module], model_last: bool) -> bool:
    module = modules[path]
    if isinstance(module, _CHANNELS_FIRST) or type(module).__name__.lower().endswith("2d"):
        return False
    if isinstance(module, _LAST_AXIS):
        return True
    parts = [m for m in module.modules() if any(True for _ in m.parameters(recurse=False))]
    if parts and all(
        isinstance(m, _LAST_AXIS) and not type(m).__name__.lower().endswith("2d") for m in parts
    ):
        return True
    if not parts and path:
        return _last(path.rpartition(".")[0], modules, model_last)
    return model_last


def layout(shape: list[int], kind: str, channels_last: bool, module: nn.Module | None = None) -> str | None:
    """The axes of a saved tensor of ``shape`` (after any ``--reduce``), or None when no name fits."""
    if kind == "attn":
        return "attn"
    if len(shape) == 4:
        return "NHWC" if channels_last else "NCHW"
    if len(shape) == 3:
        return "NCL" if isinstance(module, _CHANNELS_FIRST_1D) else "NLC"
    if len(shape) == 2:
        return "NC"
    return None


def saved(
    layer: str, kind: str, shape: list[int], last: bool, traced_rows: int, modules: dict[str, nn.Module]
) -> tuple[str | None, dict[str, Any] | None]:
    """The layout of a tensor saved as ``shape``, and the windows record of a windowed one: ``traced_rows``
    is its first axis in the batch-of-one trace (the windows per image; 1 for a tensor of images); ``last``:
    a 4-D map is channels last."""
    name = layout(shape, kind, last, modules.get(layer))
    if traced_rows > 1 and shape and shape[0] % traced_rows == 0:
        windows = {"per_image": traced_rows, **_geometry(layer, modules, traced_rows)}
        return (name if name == "attn" else "windows"), windows
    return name, None


def _geometry(path: str, modules: dict[str, nn.Module], per_image: int) -> dict[str, Any]:
    """Where each window lies, from the nearest enclosing block that partitions its map into windows (Swin's
    ``SwinTransformerBlock``); empty when none says, or when its windows do not tile ``per_image`` times."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        block = modules.get(".".join(parts[:end]))
        size = getattr(block, "window_size", None)
        shift = getattr(block, "shift_size", None)
        grid = getattr(block, "input_resolution", None)
        if not all(isinstance(v, (tuple, list)) and len(v) == 2 for v in (size, shift, grid)):
            continue
        (wh, ww), (h, w) = size, grid  # type: ignore[misc]
        if -(-h // wh) * -(-w // ww) == per_image:
            return {"size": [int(wh), int(ww)], "map": [int(h), int(w)], "shift": [int(v) for v in shift]}  # type: ignore[union-attr]
        return {}
    return {}


def check_reduce(how: str, shapes: dict[str, list[list[int]]]) -> None:
    """``--reduce`` pools each row of a tensor: refuse it for windowed tensors (several rows per image in the
    batch-of-one trace), which would give one vector per window, not per image."""
    if how == "none":
        return
    for name, leaves in shapes.items():
        rows = next((s[0] for s in leaves if s and s[0] > 1), None)
        if rows is not None:
            shape = tuple(next(s for s in leaves if s and s[0] == rows))
            raise UsageError(
                f"--reduce {how} pools each row, and `{name}` holds {rows} rows per image ({shape} for one"
                " image: windows, as in Swin): it would give one vector per window, not one per image.",
                f"Capture `{name}` without --reduce (its file records the windows), or reduce the block"
                " around it, whose output is the whole map.",
            )
