"""What hookdump reads off timm models, set on an ``open_clip:`` tower under timm's names: its tokens
(``num_prefix_tokens``, ``cls_token``) and feature levels (``feature_info``)."""

from __future__ import annotations

from torch import nn

from ... import featlevels
from .model import TOWER


def facts(model: nn.Module) -> nn.Module:
    """The tower's tokens and feature levels under timm's names on the wrapper (plain attributes: the state
    dict does not change): ``num_prefix_tokens`` and ``cls_token`` (the class embedding) of open_clip's
    VisionTransformer, or of the timm trunk of a timm-built tower; ``feature_info``: the transformer's
    blocks, ModifiedResNet's stages, a timm trunk's own levels."""
    visual = model.get_submodule(TOWER)
    trunk = getattr(visual, "trunk", None)
    if isinstance(trunk, nn.Module):  # a timm model inside open_clip's TimmModel
        prefix, token = getattr(trunk, "num_prefix_tokens", None), getattr(trunk, "cls_token", None)
        levels = [{**d, "module": f"{TOWER}.trunk.{d['module']}"} for d in featlevels.read(trunk) or []]
    elif hasattr(visual, "class_embedding"):  # open_clip's VisionTransformer
        prefix, token = 1, visual.class_embedding
        patch = int(getattr(visual, "patch_size", (1,))[0])
        width = int(visual.get_parameter("class_embedding").shape[-1])
        levels = featlevels.block_levels(model, f"{TOWER}.transformer.resblocks", width, patch)
    else:  # ModifiedResNet: four stages
        prefix, token = None, None
        levels = featlevels.stage_levels(model, TOWER)
    setattr(model, "feature_info", levels)  # noqa: B010  (plain attributes)
    if prefix is not None:
        setattr(model, "num_prefix_tokens", int(prefix))  # noqa: B010
    if token is not None:
        object.__setattr__(model, "cls_token", token)
    return model
