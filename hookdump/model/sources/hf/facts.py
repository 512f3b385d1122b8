"""What hookdump reads off a timm model, found for an ``hf:`` model by one traced pass on the meta device and
set on it under timm's names, so that the layer specs, ``--reduce`` and the pictures ask nothing new:

* ``feature_info``: ``feat:K`` is the K-th hidden state (what ``output_hidden_states=True`` returns; 0 is the
  embeddings), as the module whose output *is* that tensor (the same object: ``embeddings`` for 0 and
  ``layers.{K-1}`` for K >= 1 in transformers 5's ViT); a hidden state no module outputs as it is (one made
  inside a forward, a tuple's second element) is refused with the reason;
* ``num_prefix_tokens`` (class, distillation, register tokens ahead of the patches),
  ``patch_embed.num_patches`` and ``cls_token`` (the model's class token parameter, where it has one: ViT,
  DeiT, DINOv2, BEiT, CLIP);
* a classification model returns its ``logits`` (for ``--grad``), not transformers' ``ModelOutput``.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...featlevels import MAX_PREFIX_TOKENS
from . import attention as hf_attention

CLASS_TOKENS = ("cls_token", "class_embedding")  # ViT / DeiT / DINOv2 / BEiT; CLIP


@dataclass(frozen=True)
class Facts:
    """What one traced pass of an ``hf:`` model says (see the module's docstring)."""

    input_size: tuple[int, ...]
    levels: list[dict[str, Any]] = field(default_factory=list)
    prefix_tokens: int | None = None
    patches: int | None = None
    class_token: str | None = None  # the parameter's name


def trace(model: nn.Module, input_size: tuple[int, ...]) -> Facts:
    """One forward of ``model`` (on the meta device) with ``output_hidden_states=True`` and a hook on every
    module: each hidden state to the module that output it."""
    done: list[tuple[str, Any]] = []  # (module, output) in the order the modules finished

    def hook(name: str) -> Callable[[nn.Module, Any, Any], None]:
        return lambda module, args, output: done.append((name, output))

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n]
    model.eval()
    try:
        with torch.no_grad():
            device = next(model.parameters()).device
            result = model(torch.zeros(1, *input_size, device=device), output_hidden_states=True)
        hidden = list(getattr(result, "hidden_states", None) or [])
    except Exception:  # a model that cannot run on meta: no feature levels, the rest as timm's defaults
        hidden = []
    finally:
        for handle in handles:
            handle.remove()
    names = {n for n, _ in model.named_parameters()}
    token = next((n for n in sorted(names) if n.rpartition(".")[2] in CLASS_TOKENS), None)
    patch = getattr(model.config, "patch_size", None)
    patch = int(patch[0] if isinstance(patch, (list, tuple)) else patch) if patch else None
    levels = [_level(k, h, done, input_size, patch) for k, h in enumerate(hidden)]
    prefix = patches = None
    if hidden and hidden[0].dim() == 3 and levels[0]["reduction"] > 0:
        grid = _grid(input_size, levels[0]["reduction"])
        prefix, patches = hidden[0].shape[1] - grid, grid
    return Facts(tuple(input_size), levels, prefix, patches, token if prefix else None)


def _owner(tensor: torch.Tensor, done: list[tuple[str, Any]]) -> tuple[str, int | None] | None:
    """The outermost module (the last to finish) that output ``tensor`` itself, or as element i of a tuple."""
    whole = [name for name, out in done if out is tensor]
    if whole:
        return whole[-1], None
    parts = [
        (n, i) for n, out in done if isinstance(out, (tuple, list)) for i, o in enumerate(out) if o is tensor
    ]
    return parts[-1] if parts else None


def _grid(input_size: tuple[int, ...], reduction: int) -> int:
    return (input_size[-2] // reduction) * (input_size[-1] // reduction)


def _reduction(shape: tuple[int, ...], input_size: tuple[int, ...], patch: int | None) -> int:
    """The stride of a hidden state: ``H / h`` of a map, the patch size of tokens (or the stride whose grid
    the tokens make, after at most ``MAX_PREFIX_TOKENS`` leading ones); 0 when none fits."""
    if len(shape) == 4:
        return input_size[-2] // shape[2] if shape[2] else 0
    if len(shape) != 3:
        return 0
    tried = ([patch] if patch else []) + [r for r in range(1, input_size[-2] + 1) if input_size[-2] % r == 0]
    return next((r for r in tried if 0 <= shape[1] - _grid(input_size, r) <= MAX_PREFIX_TOKENS), 0)


def _level(
    index: int,
    hidden: torch.Tensor,
    done: list[tuple[str, Any]],
    input_size: tuple[int, ...],
    patch: int | None,
) -> dict[str, Any]:
    """The ``feature_info`` entry of hidden state ``index``, with a ``problem`` where no module outputs it."""
    shape = tuple(hidden.shape)
    channels = shape[1] if len(shape) == 4 else shape[-1]
    entry: dict[str, Any] = {"num_chs": int(channels), "reduction": _reduction(shape, input_size, patch) or 1}
    owner = _owner(hidden, done)
    if owner is None or owner[1] not in (None, 0):
        what = (
            "no module outputs it as it is" if owner is None else f"it is output {owner[1]} of `{owner[0]}`"
        )
        return entry | {
            "module": owner[0] if owner else "",
            "problem": f"hidden state {index} (output_hidden_states=True) is made inside a forward: {what}",
            "fix": "Capture a module instead; `hookdump list-modules -m MODEL` shows them.",
        }
    return entry | {"module": owner[0]}


def prepare(model: nn.Module, facts: Facts, classifier: bool) -> nn.Module:
    """``model`` with the facts under timm's names (plain attributes: the state dict does not change), a
    classifier returning its logits, and each attention layer's own switch to its eager path."""
    setattr(model, "feature_info", [dict(level) for level in facts.levels])  # noqa: B010  (plain attributes)
    if facts.prefix_tokens is not None:
        setattr(model, "num_prefix_tokens", facts.prefix_tokens)  # noqa: B010
        setattr(model, "patch_embed", types.SimpleNamespace(num_patches=facts.patches))  # noqa: B010
    if facts.class_token is not None:  # the parameter, not registered again: a plain attribute
        object.__setattr__(model, "cls_token", model.get_parameter(facts.class_token))
    if classifier:
        model.register_forward_hook(_logits)
    hf_attention.add_switches(model)
    return model


def _logits(module: nn.Module, args: Any, output: Any) -> Any:
    logits = getattr(output, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else None
