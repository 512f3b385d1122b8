"""The image tower of an OpenCLIP model as ``open_clip:ARCH`` or ``open_clip:ARCH:TAG`` (``open_clip``'s
own ``list_pretrained(as_str=True)`` names): the tower alone, built from the architecture's config (the text
tower is never made), under ``visual`` as in the CLIP model (``visual.transformer.resblocks.5``), so the
output of ``visual`` is ``encode_image``. Weights: seeded random ones, a ``--checkpoint`` (a CLIP state
dict, whose ``visual.`` tensors are taken, or the tower's own), or ``--pretrained`` with a tag (open_clip's
download, or its cache). The eval transform is open_clip's for that architecture and tag.

The record of the model (``model``), the tower built (``build``), its weights (``weights``), its tokens and
feature levels under timm's names (``facts``), open_clip's preprocess as a data config (``transform``);
open_clip is the ``open_clip`` extra, imported where used."""

from __future__ import annotations

from ...spec import ModelSpec
from ..base import Source
from .build import build_meta
from .model import PREFIX, name, record, resolve
from .transform import data_config
from .weights import checkpoint_fits, load

__all__ = ["PREFIX", "source"]


def source(spec: ModelSpec) -> Source:
    found = resolve(spec)
    return Source(
        name(found),
        build_meta=lambda: build_meta(found),
        load=lambda: load(found),
        check_weights=lambda meta: checkpoint_fits(found, meta),
        preprocess=lambda needed: data_config(found),
        record=record(found),
        rerun=spec.name,
    )
