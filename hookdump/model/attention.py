"""``--attention``: the softmax weights of timm's attention modules, which fused attention never makes.

timm's attention modules carry a ``fused_attn`` flag: when it is on, ``F.scaled_dot_product_attention``
computes the result without ever holding the attention weights, and the module's ``attn_drop`` is never
called. With the flag off, the same math runs step by step, ``softmax(q k^T * scale [+ bias, mask])`` goes
through ``attn_drop`` (identity in eval mode; DaViT's WindowAttention has an ``nn.Softmax`` child instead),
and a hook there sees the weights: hookdump saves them as ``<attention module>.attn``, shape
``(N, heads, L, L)`` for ViT-style attention; other shapes where the model's attention is other (Swin
windows: ``(N * windows, heads, w*w, w*w)``; spatial reduction in PVT v2 and Twins: ``(N, heads, L, L')``;
class attention in CaiT: ``(N, heads, 1, L)``; Twins' locally-grouped windows: ``(N, windows, heads, w*w,
w*w)``). CaiT's talking-heads blocks save the weights after ``proj_w`` mixed the heads, whose rows do not
sum to 1 (:func:`notes` says so).
"""

from __future__ import annotations

import re

from torch import nn

from .. import patterns
from ..errors import LayerError
from ..units import first_few
from .layers import LayerTarget
from .tree import ATTN_DROP as DROP
from .tree import Inventory


def unfuse(model: nn.Module) -> int:
    """Turn timm's fused attention off in every module that has the switch; how many had it on."""
    count = 0
    for module in model.modules():
        if getattr(module, "fused_attn", None) is True:
            setattr(module, "fused_attn", False)  # noqa: B010  (a plain attribute, not a submodule)
            count += 1
    return count


def targets(chosen: list[LayerTarget], inventory: Inventory, model_label: str) -> dict[str, str]:
    """For each chosen attention module, the child whose output is its attention weights: ``{child path:
    attention module path}``. None among the chosen layers is an error with the fix."""
    found: dict[str, str] = {}
    for target in chosen:
        child = weights_child(target.path, inventory)
        if child is not None:
            found[child] = target.path
    if not found:
        raise _none_chosen(inventory, model_label)
    return found


def _none_chosen(inventory: Inventory, model_label: str) -> LayerError:
    """No chosen layer gives attention weights: the error names this model's modules that do (as a glob),
    or, when none does, its attention modules and why their weights cannot be had."""
    what = (
        f"--attention: none of the layers asked for is an attention module of {model_label} whose attention"
        f" weights can be captured (a module with an `{DROP}` child, as timm's Attention, or an nn.Softmax"
        " child that outputs (N, heads, L, S) weights, as DaViT's WindowAttention)"
    )
    names = [m.name for m in inventory.modules if weights_child(m.name, inventory) is not None]
    if names:
        return LayerError(
            f"{what}.",
            f"Ask for its attention modules themselves: -l '{_glob(names, inventory)}' ({len(names)} of them:"
            f" {first_few(names)}).",
        )
    others = [m for m in inventory.modules if m.type.lower().endswith("attention") and m.fires]
    if not others:
        return LayerError(f"{what}; it has no attention module at all.", "Drop --attention.")
    kinds = ", ".join(sorted({m.type for m in others}))
    paths = [m.name for m in others]
    return LayerError(
        f"{what}. Its attention modules ({first_few(paths)}: {kinds}) compute their weights inside one fused"
        " call that no hook can see.",
        f"Capture their outputs without --attention (-l '{_glob(paths, inventory)}'), or use a timm model of"
        " the same architecture, whose attention --attention unfuses.",
    )


def _glob(names: list[str], inventory: Inventory) -> str:
    """One glob for module paths that differ only in their numbers: ``*`` for each number that varies
    (``blocks.*.attn``, ``encoder.layers.encoder_layer_*.self_attention``), a set of digits for one or all
    of them (``stages.[23].blocks.*.attn``) where ``*`` would pick other modules too; the ``*`` one when
    none picks exactly those, the first path when their shapes differ."""
    split = [re.split(r"(\d+)", name) for name in names]  # odd items: the runs of digits
    if len({tuple(parts[::2]) for parts in split}) != 1:
        return names[0]
    columns = [sorted(set(column)) for column in zip(*split, strict=True)]
    digits = [i for i, values in enumerate(columns) if len(values) > 1 and max(map(len, values)) == 1]

    def glob(sets: set[int]) -> str:
        return "".join(
            values[0] if len(values) == 1 else f"[{''.join(values)}]" if i in sets else "*"
            for i, values in enumerate(columns)
        )

    every = [m.name for m in inventory.modules]
    for candidate in (glob(set()), *(glob({i}) for i in digits), glob(set(digits))):
        if set(patterns.match(candidate, every) or ()) == set(names):
            return candidate
    return glob(set())


def weights_child(path: str, inventory: Inventory) -> str | None:
    """The child of ``path`` that outputs its attention weights, found by what it computes: ``attn_drop``
    (timm passes the softmax weights through it), else an ``nn.Softmax`` child whose traced output is 4-D
    ``(N, heads, L, S)`` (DaViT's WindowAttention has no ``attn_drop``); None when neither runs."""
    module = inventory.get(path)
    if module is None:
        return None
    drop = inventory.get(f"{path}.{DROP}")
    if drop is not None and drop.fires:
        return drop.name
    for name in module.children:
        child = inventory.get(name)
        if child is not None and child.type == "Softmax" and child.fires:
            shapes = child.output_shapes
            if len(shapes) == 1 and len(shapes[0]) == 4:
                return child.name
    return None


def notes(found: dict[str, str], inventory: Inventory) -> list[str]:
    """What is unusual about the weights saved: talking-heads attention (CaiT's ``TalkingHeadAttn``: a
    ``proj_w`` child mixes the heads after the softmax) saves mixed weights whose rows do not sum to 1."""
    said = []
    for child, owner in found.items():
        module = inventory.get(owner)
        if module is not None and {f"{owner}.proj_l", f"{owner}.proj_w"} <= set(module.children):
            said.append(
                f"{owner}.attn ({module.type}) holds talking-heads weights: the softmax mixed across heads by"
                f" {owner}.proj_w, as `{child}` receives them, so its rows do not sum to 1 (the softmax"
                " itself is computed inside the module and is never a tensor a hook can see)"
            )
    return said
