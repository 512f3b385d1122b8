"""timm's models built: on the meta device, without weight init under a checkpoint, or with timm's
pretrained weights (an error paragraph offline); a builder's failure explained."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ....errors import InputError
from ... import hub
from ...args import format_model_args
from ...meta import SkipValueWrites
from ...spec import ModelSpec
from ...weights import build_uninitialised, check_hookable, load_checkpoint, random_note
from .names import ALIASES, no_plugin_needed
from .plugins import plugin_of

#: What timm 1.x passes every builder besides the user's arguments; builders written for timm 0.x choke on it.
TIMM_KWARGS = ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")


def build(
    timm_name: str,
    *,
    pretrained: bool = False,
    meta: bool = False,
    skip_init: bool = False,
    args: Mapping[str, Any] | None = None,
) -> nn.Module:
    """Create the model with timm (``args``: keywords for ``timm.create_model``); on the meta device when
    ``meta`` (no weights allocated); without weight init when ``skip_init`` (parameters left uninitialised:
    a checkpoint is loaded over them)."""
    import timm

    kwargs = dict(args or {})
    offline = hub.offline_reason() if pretrained and not meta else None
    try:
        if meta or skip_init:
            model = (
                build_meta(timm_name, kwargs)
                if meta
                else build_uninitialised(lambda: timm.create_model(timm_name, **kwargs))
            )
        else:
            model = timm.create_model(timm_name, pretrained=pretrained, **kwargs)
    except Exception as exc:
        if meta:
            raise
        if pretrained and offline:
            raise InputError(
                f"Could not get the pretrained weights of `{timm_name}`: {offline}, and they are not in the"
                " local cache (~/.cache/huggingface).",
                "Download them once where there is network, or pass --checkpoint PATH.",
            ) from exc
        if pretrained:
            raise InputError(
                f"Could not get the pretrained weights of `{timm_name}`: {type(exc).__name__}: {exc}",
                "They come from the Hugging Face hub, which this machine cannot reach (or which has no"
                " weights for this name). Download them once where there is network (they are cached in"
                " ~/.cache/huggingface) or pass --checkpoint PATH. Offline, HF_HUB_OFFLINE=1 makes this"
                " check answer at once instead of retrying.",
            ) from exc
        raise builder_error(timm_name, exc, kwargs) from exc
    check_hookable(model, timm_name)
    return model


def builder_error(timm_name: str, exc: Exception, args: Mapping[str, Any]) -> InputError:
    """Why ``timm.create_model`` raised, with the fix that fits: an argument the model does not take, a
    plugin written for an older timm (and, for a Twins name, that the built-in alias needs no plugin)."""
    text = f"The model builder of `{timm_name}` raised {type(exc).__name__}: {exc}"
    found = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
    key = found[1] if found else None
    plugin = plugin_of(timm_name)
    if key in args:
        return InputError(
            f"{text}: --model-arg {key} is not an argument of {timm_name}.",
            f"Drop --model-arg {key}=...; a timm model takes the arguments of its class (num_classes,"
            " in_chans, drop_rate, global_pool, ...).",
        )
    old_timm = key in TIMM_KWARGS
    if plugin is not None and (old_timm or timm_name in ALIASES):
        why = f": plugin `{plugin}` was written for an older timm." if old_timm else f" (plugin `{plugin}`)."
        alias = f"{no_plugin_needed(timm_name)} " if timm_name in ALIASES else ""
        fix = (
            "To use the plugin anyway, let its builder accept **kwargs and drop the ones timm 1.x adds"
            f" ({', '.join(TIMM_KWARGS)}) before building its model."
            if old_timm
            else "To use the plugin anyway, fix its builder (HOOKDUMP_DEBUG=1 shows the traceback)."
        )
        return InputError(text + why, alias + fix)
    if args:
        given = " ".join(format_model_args(args))
        return InputError(
            text, f"Check the --model-arg values ({given}); HOOKDUMP_DEBUG=1 shows the traceback."
        )
    where = f"plugin `{plugin}`" if plugin else "the model's code"
    return InputError(text, f"This is an error in {where}; HOOKDUMP_DEBUG=1 shows the traceback.")


def build_meta(timm_name: str, kwargs: dict[str, Any]) -> nn.Module:
    """On meta, without running weight init; again with init if a builder needs the writes."""
    import timm

    try:
        with torch.device("meta"), SkipValueWrites():
            return timm.create_model(timm_name, **kwargs)  # type: ignore[no-any-return]
    except Exception:
        with torch.device("meta"):
            return timm.create_model(timm_name, **kwargs)  # type: ignore[no-any-return]


def load(spec: ModelSpec, timm_name: str) -> tuple[nn.Module, list[str]]:
    """Build the real model (on the CPU) with its weights; return it and what to say about the weights.

    Random weights are drawn from ``spec.seed`` without touching the caller's random state; with a
    checkpoint, weight init is skipped (its values would be overwritten).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        skip_init = spec.checkpoint is not None and not spec.pretrained  # the checkpoint overwrites them all
        model = build(timm_name, pretrained=spec.pretrained, skip_init=skip_init, args=spec.model_args)
    if spec.checkpoint is not None:
        load_checkpoint(model, spec.checkpoint, timm_name)
        note = f"weights: {spec.checkpoint}"
    elif spec.pretrained:
        offline = hub.offline_reason()
        note = "weights: timm pretrained" + (f" (from the local cache: {offline})" if offline else "")
    else:
        note = random_note(spec.seed)
    return model, [note]
