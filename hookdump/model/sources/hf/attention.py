"""``--attention`` for ``hf:`` models: the attention weights of exactly the hooked layers, each layer switched
to transformers' eager path on its own while the others stay on SDPA.

transformers 5's attention modules (``ViTAttention``, ``CLIPAttention``, ...) pick their path at each call
from ``self.config._attn_implementation``: ``sdpa`` never holds the weights, ``eager`` returns them as the
module's second output. hookdump gives each such module what timm's have, so that ``model/attention.py``
works unchanged:

* an ``attn_drop`` child (``nn.Identity``, no parameters) that the eager weights are passed through after
  the module's forward, where a hook sees them as ``(N, heads, L, L)``;
* a ``fused_attn`` flag (on where the model runs SDPA), which ``--attention`` turns off;
* its own shallow copy of the config, whose ``_attn_implementation`` is set before each call: ``eager``
  while the flag is off *and* a hook is on its ``attn_drop`` (hookdump's, for the layers asked for),
  else the model's own. So the layers whose weights are not captured keep the fused path.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
from torch import nn

from ...tree import ATTN_DROP

_DISPATCHES: dict[type, bool] = {}  # whether a class's forward picks its path from the config
FUSED = "hookdump_fused_path"  # the module's own implementation (sdpa, ...), kept on the module


def dispatches(kind: type) -> bool:
    """Whether ``kind``'s forward picks an attention function by ``config._attn_implementation`` (an attention
    module of transformers 5), not a model that merely passes the config on."""
    if kind not in _DISPATCHES:
        try:
            text = inspect.getsource(kind.forward)  # type: ignore[attr-defined]
        except (OSError, TypeError, AttributeError):
            text = ""
        model = any(base.__name__ == "PreTrainedModel" for base in kind.__mro__)
        _DISPATCHES[kind] = not model and "_attn_implementation" in text and "attention_interface" in text
    return _DISPATCHES[kind]


def add_switches(model: nn.Module) -> int:
    """Give each attention module of ``model`` its ``attn_drop``, ``fused_attn`` and own config; how many."""
    count = 0
    for module in list(model.modules()):
        config = getattr(module, "config", None)
        if config is None or ATTN_DROP in module._modules or not dispatches(type(module)):
            continue
        own = copy.copy(config)
        path = getattr(config, "_attn_implementation", None) or "eager"
        module.config = own
        setattr(module, FUSED, path)
        setattr(module, "fused_attn", path != "eager")  # noqa: B010  (a plain attribute, as timm's)
        module.add_module(ATTN_DROP, nn.Identity())
        module.register_forward_pre_hook(_pick_path)
        module.register_forward_hook(_pass_weights)
        count += 1
    return count


def _hooked(module: nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _pick_path(module: nn.Module, args: Any) -> None:
    eager = not getattr(module, "fused_attn", True) and _hooked(module._modules[ATTN_DROP])  # type: ignore[arg-type]
    config: Any = module.config
    config._attn_implementation_internal = "eager" if eager else getattr(module, FUSED)


def _pass_weights(module: nn.Module, args: Any, output: Any) -> None:
    if isinstance(output, tuple) and len(output) > 1 and isinstance(output[1], torch.Tensor):
        module._modules[ATTN_DROP](output[1])  # type: ignore[misc]
