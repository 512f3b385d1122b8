"""The image tower of an ``open_clip:`` model built alone from its architecture's config (the text tower is
never made), under ``visual`` as in the CLIP model; on the meta device without its weight init, or with a
builder's failure explained."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ....errors import InputError
from ...meta import SkipValueWrites
from .facts import facts
from .model import OpenCLIPModel


class ImageTower(nn.Module):
    """An OpenCLIP image tower under ``visual``, as in the CLIP model: its output is ``encode_image``."""

    def __init__(self, visual: nn.Module) -> None:
        super().__init__()
        self.visual = visual

    def forward(self, image: torch.Tensor) -> Any:
        return self.visual(image)


def tower(found: OpenCLIPModel) -> nn.Module:
    """The tower built from the architecture's config (with the ``--model-arg`` values), under ``visual``."""
    from open_clip.model import _build_vision_tower  # the optional extra, imported where used

    visual: nn.Module = _build_vision_tower(found.config["embed_dim"], found.vision, found.quick_gelu)
    return ImageTower(visual)


def built(found: OpenCLIPModel, make: Any) -> nn.Module:
    """What ``make()`` builds, or the error saying why open_clip could not build the tower."""
    try:
        return make()  # type: ignore[no-any-return]
    except Exception as exc:
        raise InputError(
            f"open_clip's image tower of `{found.spec.name}` could not be built: {type(exc).__name__}: {exc}",
            "Check the --model-arg values: they are keys of open_clip's CLIPVisionCfg (layers, width,"
            " patch_size, image_size, ...)."
            if found.spec.model_args
            else "This is an error in open_clip's model code; HOOKDUMP_DEBUG=1 shows the traceback.",
        ) from exc


def build_meta(found: OpenCLIPModel) -> nn.Module:
    """The tower on the meta device, without its weight init."""
    with torch.device("meta"), SkipValueWrites():
        return facts(built(found, lambda: tower(found)))
