"""timm's models, by a plain name: a timm name, a Twins alias, or a name a plugin registered (``--import``);
seeded random weights, a ``--checkpoint``, or timm's hub weights (``--pretrained``)."""

from __future__ import annotations

from ...spec import ModelSpec
from ...weights import check_weights
from ..base import Source, no_preprocessing
from . import create, names

PREFIX = ""  # a name with no other source's prefix


def source(spec: ModelSpec) -> Source:
    name = names.resolve_name(spec)
    timm_name = name.timm_name
    assert timm_name is not None
    return Source(
        name,
        build_meta=lambda: create.build(timm_name, meta=True, args=spec.model_args),
        load=lambda: create.load(spec, timm_name),
        check_weights=lambda meta: check_weights(spec, meta, timm_name),
        preprocess=no_preprocessing,
        record={"source": "timm"},
        rerun=spec.name,
    )
