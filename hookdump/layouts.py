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
``NCL`` (1-D convs), ``NC`` (vectors, and pooled ``--reduce`` maps), ``attn`` (``(N, heads, L, L)``).
"""

from __future__ import annotations

from torch import nn

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
