"""``hf:ID_OR_FOLDER``: a Hugging Face transformers vision model (``load``), its image processor as the eval
transform (``transform``), what hookdump reads off timm models found in one meta pass (``facts``), and
``--attention`` as each hooked layer's own switch to the eager path (``attention``); ``model`` holds the
record they share. transformers is the ``hf`` extra, imported where used."""

from __future__ import annotations

from torch import nn

from ...spec import ModelSpec
from ..base import Source, unfused_attention
from . import load, transform
from .attention import FUSED

PREFIX = load.PREFIX


def source(spec: ModelSpec) -> Source:
    found = load.resolve(spec)
    return Source(
        load.name(found),
        build_meta=lambda: load.build_meta(found),
        load=lambda: load.load(found),
        check_weights=lambda meta: load.check_weights(found, meta),
        preprocess=lambda needed: transform.data_config(found),
        record=load.record(found),
        rerun=spec.name,
        attention=attention_summary,
    )


def attention_summary(model: nn.Module, unfused: int, found: dict[str, str]) -> str:
    """What ``--attention`` did: the hooked layers alone run transformers' eager path (the rest SDPA)."""
    if not any(getattr(m, FUSED, None) is not None for m in model.modules()):
        return unfused_attention(model, unfused, found)
    return (
        f"--attention: the {len(found)} hooked attention module(s) run transformers' eager path (the same"
        f" math, step by step), the model's other {max(unfused - len(found), 0)} keep their fused one; the"
        f" weights of {len(found)} attention module(s) are saved as <module>.attn"
    )
