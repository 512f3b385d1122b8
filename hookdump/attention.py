"""``--attention``: the softmax weights of timm's attention modules, which fused attention never makes.

timm's attention modules carry a ``fused_attn`` flag: when it is on, ``F.scaled_dot_product_attention``
computes the result without ever holding the attention weights, and the module's ``attn_drop`` is never
called. With the flag off, the same math runs step by step, ``softmax(q k^T * scale [+ bias, mask])`` goes
through ``attn_drop`` (identity in eval mode), and a hook there sees the weights: hookdump saves them as
``<attention module>.attn``, shape ``(N, heads, L, L)`` for ViT-style attention; other shapes where the
model's attention is other (Swin windows: ``(N * windows, heads, w*w, w*w)``; spatial reduction in PVT v2 and
Twins: ``(N, heads, L, L')``; class attention in CaiT: ``(N, heads, 1, L)``).
"""

from __future__ import annotations

from torch import nn

from .errors import LayerError
from .inventory import ATTN_DROP as DROP
from .inventory import Inventory
from .layers import LayerTarget


def unfuse(model: nn.Module) -> int:
    """Turn timm's fused attention off in every module that has the switch; how many had it on."""
    count = 0
    for module in model.modules():
        if getattr(module, "fused_attn", None) is True:
            setattr(module, "fused_attn", False)  # noqa: B010  (a plain attribute, not a submodule)
            count += 1
    return count


def targets(chosen: list[LayerTarget], inventory: Inventory, model_label: str) -> dict[str, str]:
    """For each chosen attention module, the ``attn_drop`` child whose output is its attention weights:
    ``{attn_drop path: attention module path}``. None among the chosen layers is an error with the fix."""
    found: dict[str, str] = {}
    for target in chosen:
        drop = inventory.get(f"{target.path}.{DROP}")
        if drop is not None and drop.fires:
            found[drop.name] = target.path
    if not found:
        raise LayerError(
            f"--attention: none of the layers asked for is an attention module of {model_label} whose"
            f" attention weights can be captured (a module with an `{DROP}` child, timm's Attention).",
            f"Ask for the attention modules themselves, e.g. -l 'blocks.*.attn'; `hookdump list-modules"
            f" {model_label} --filter '**.{DROP}'` lists where they are.",
        )
    return found
