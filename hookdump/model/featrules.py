"""Where each family's feature levels come from, when timm's ``feature_info`` name is not the module whose
output is the level: rules read from each family's own ``forward_intermediates`` / ``features_only`` code
(used by :mod:`hookdump.featlevels`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tree import Inventory

UNROLLED = "hookdump_unrolled"  # Hiera: whether a level's block still holds its tokens in mask-unit order


@dataclass(frozen=True)
class Found:
    """The module whose output is a level, and which of its output tensors (None: the only one)."""

    path: str
    element: int | None = None


Rule = Callable[[int, str, "Inventory"], "Found | str"]


def annotate(model: Any, info: list[dict[str, Any]]) -> None:
    """Facts a rule needs that only the model object has, written into its ``feature_info`` entries.

    Hiera: whether ``Reroll`` still has unrolls to undo at the level's block (``reroll.schedule[block]``
    not empty), or whether the block's tokens are already in raster order (the last stage, after every
    pooling has undone one unroll), so that the block's output reshaped is the map.
    """
    schedule = getattr(getattr(model, "reroll", None), "schedule", None)
    if not isinstance(schedule, dict):
        return
    for entry in info:
        block = entry["module"].removeprefix("blocks.")
        if block.isdigit() and int(block) in schedule:
            entry[UNROLLED] = bool(schedule[int(block)][0])


def by_name(index: int, name: str, inventory: Inventory) -> Found | str:
    """timm's default: the named module's output (FeatureListNet, FeatureHooks, forward_intermediates)."""
    module = inventory.get(name)
    if module is None:
        return f"timm names `{name}`, not a module of {inventory.root_type}, and hookdump has no rule for it"
    if module.container:
        return f"timm names `{name}`, a {module.type} (never called), and hookdump has no rule for it"
    return Found(name)


def _twins(index: int, name: str, inventory: Inventory) -> Found | str:
    """``block.K``: stage K's tokens after its last block, or after its PosConv when the stage has one block
    (``Twins.forward_intermediates`` runs ``pos_block[K]`` right after block 0)."""
    number = name.removeprefix("block.")
    stage = inventory.get(f"blocks.{number}")
    if not name.startswith("block.") or stage is None or not stage.children:
        return by_name(index, name, inventory)
    return Found(f"pos_block.{number}" if len(stage.children) == 1 else stage.children[-1])


def _coat(index: int, name: str, inventory: Inventory) -> Found | str:
    """``serial_blocksN``: its last block's tokens; ``parallel_blocks``: output ``index`` of the last parallel
    block, which returns the four scales (``CoaT.forward_intermediates``)."""
    group = inventory.get(name)
    if group is None or not group.container or not group.children:
        return by_name(index, name, inventory)
    return Found(group.children[-1], index if name == "parallel_blocks" else None)


def _hrnet(index: int, name: str, inventory: Inventory) -> Found | str:
    """``stem``: the first conv's activation ``act1`` (stride 2); ``stageN``: ``incre_modules[N-1]``, the
    head's channel increase applied to branch N (``HighResolutionNetFeatures.forward``)."""
    if name == "stem" and index == 0:
        return Found("act1")
    incre = f"incre_modules.{index - 1}"
    if name == f"stage{index}" and inventory.get(incre) is not None:
        return Found(incre)
    return (
        f"timm's `{name}` of HighResolutionNet is not a module output hookdump can name without incre_modules"
    )


def _hiera(index: int, name: str, inventory: Inventory) -> Found | str:
    """Hiera's blocks keep their tokens unrolled (mask units first) and ``forward_intermediates`` rerolls
    them into a map outside any module; after the last pooling nothing is left to reroll, and the block's
    tokens are the map in raster order (see :func:`annotate`)."""
    declared = inventory.feature_info or []
    if index < len(declared) and declared[index].get(UNROLLED) is False:
        return by_name(index, name, inventory)
    return (
        f"Hiera's `{name}` returns its tokens in unrolled (mask-unit) order; timm rerolls them into the map"
        " outside any module, so no module's output equals this level"
    )


def _mvitv2(index: int, name: str, inventory: Inventory) -> Found | str:
    """``block.K``: the tokens stage K returns (``stages.K`` returns ``(tokens, feat_size)``; timm drops the
    class token, when there is one, and reshapes: ``MultiScaleVit.forward_intermediates``)."""
    number = name.removeprefix("block.")
    if name.startswith("block.") and inventory.get(f"stages.{number}") is not None:
        return Found(f"stages.{number}", 0)
    return by_name(index, name, inventory)


RULES: dict[str, Rule] = {
    "Twins": _twins, "CoaT": _coat, "HighResolutionNet": _hrnet, "Hiera": _hiera, "MultiScaleVit": _mvitv2,
}  # fmt: skip
