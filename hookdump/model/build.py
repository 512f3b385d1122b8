"""From a model name (timm name, Twins alias or plugin), its arguments and weights to an ``nn.Module``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import InputError, UsageError, did_you_mean
from ..units import first_few
from . import hub
from .args import format_model_args
from .checkpoints import CHECKPOINT_SUFFIXES, check_fits, read_checkpoint
from .meta import SkipInit, SkipValueWrites
from .plugins import import_plugins, plugin_of, registered_by

__all__ = ["CHECKPOINT_SUFFIXES", "import_plugins", "read_checkpoint"]

DEFAULT_MODEL = "alt_gvt_large"

#: The original Twins repository registered these names; timm ships the same architectures.
ALIASES = {
    "alt_gvt_small": "twins_svt_small",
    "alt_gvt_base": "twins_svt_base",
    "alt_gvt_large": "twins_svt_large",
    "pcpvt_small": "twins_pcpvt_small",
    "pcpvt_base": "twins_pcpvt_base",
    "pcpvt_large": "twins_pcpvt_large",
}

#: What timm 1.x passes every builder besides the user's arguments; builders written for timm 0.x choke on it.
TIMM_KWARGS = ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")
SEED_MAX = 2**64 - 1  # torch.manual_seed's range


@dataclass(frozen=True)
class ModelSpec:
    """Which model to build, with which arguments and weights; shared by every command.

    Attributes:
        name: a timm name, a Twins alias, ``tv:NAME`` (torchvision), or ``module:CLASS`` for ``module``.
        model_args: keyword arguments for ``timm.create_model`` (``{"num_classes": 10}``), or torchvision's
            ``get_model`` for ``tv:NAME``.
        module: an ``nn.Module`` of the caller's (the API's ``model=``): hookdump runs copies of it, never it.
        transform: the caller's eval transform for ``module`` (a PIL image to a ``(C, H, W)`` float tensor).
    """

    name: str = DEFAULT_MODEL
    imports: tuple[str, ...] = ()
    checkpoint: Path | None = None
    pretrained: bool = False
    name_given: bool = True
    seed: int = 0  # random weights are drawn from this seed, so a run without trained weights repeats
    model_args: Mapping[str, Any] = field(default_factory=dict)
    module: nn.Module | None = None
    transform: Callable[[Any], torch.Tensor] | None = None


@dataclass
class ResolvedName:
    """A requested model name and the timm name it builds (None outside timm), with what to tell the user."""

    requested: str
    timm_name: str | None
    notes: list[str] = field(default_factory=list)


def resolve_name(spec: ModelSpec) -> ResolvedName:
    """Import plugins, then map the requested name onto a registered timm model."""
    import timm

    name = spec.name
    try:
        modules = import_plugins(spec.imports)
    except InputError as exc:
        if name in ALIASES:
            exc.hint = f"{exc.hint} {_no_plugin_needed(name)}"
        raise
    notes = [] if spec.name_given else [f"no model given: using the default, {DEFAULT_MODEL}"]
    if name.startswith(("hf-hub:", "hf_hub:", "local-dir:")) or timm.is_model(name):
        return ResolvedName(name, name, notes)
    if name in ALIASES:
        timm_name = ALIASES[name]
        notes.append(f"model {name} is the Twins repository's name for timm's {timm_name}")
        return ResolvedName(name, timm_name, notes)
    theirs = registered_by(modules) if modules else []
    if modules and not theirs:
        plugins = ", ".join(f"`{p}`" for p in spec.imports)
        raise InputError(
            f"Unknown model `{name}`: the plugin {plugins} registered no model with timm.",
            "Decorate the plugin's model function with @register_model (from timm.models import"
            " register_model), then pass the function's name with -m.",
        )
    close = did_you_mean(name, sorted(set(timm.list_models()) | set(ALIASES)))
    if theirs:
        shown = first_few(theirs, 8)
        raise InputError(
            f"Unknown model `{name}`: neither timm nor the plugin has a model of that name.",
            f"{close} The plugin registered {shown}.".strip(),
        )
    hint = (
        "`python -c 'import timm; print(timm.list_models(\"*name*\"))'` lists timm's models;"
        " --import MODULE_OR_FILE adds your own."
    )
    raise InputError(f"Unknown model `{name}`: timm has no model of that name.", f"{close} {hint}".strip())


def _no_plugin_needed(name: str) -> str:
    return (
        f"hookdump's built-in alias `{name}` builds timm's {ALIASES[name]}, the same architecture, with no"
        " plugin: run it without --import."
    )


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
                _build_meta(timm_name, kwargs)
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
        alias = f"{_no_plugin_needed(timm_name)} " if timm_name in ALIASES else ""
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


def check_hookable(model: object, name: str) -> None:
    """Refuse models whose module hooks would never run (scripted, compiled, exported) or would see only one
    replica's share of each batch ((Distributed)DataParallel)."""
    why = "would be skipped, so nothing would be captured"
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        kind, fix = f"wrapped in {type(model).__name__}", "return the bare module (model.module)"
        why, fix = (
            "would see only one replica's share of each batch",
            f"{fix}: hookdump puts it on --device, and torchrun spreads a capture over GPUs",
        )
    elif isinstance(model, torch.jit.ScriptModule):
        kind, fix = "a TorchScript module", "return the eager nn.Module, before torch.jit.script/trace"
    elif isinstance(model, nn.Module) and hasattr(model, "_orig_mod"):
        kind, fix = "a torch.compile'd module", "return the module before torch.compile (model._orig_mod)"
    elif not isinstance(model, nn.Module):
        kind, fix = f"a {type(model).__name__}, not an nn.Module", "return an eager nn.Module"
    else:
        return
    raise InputError(
        f"Model `{name}` is {kind}: forward hooks on its submodules {why}.", f"Let the model builder {fix}."
    )


def _build_meta(timm_name: str, kwargs: dict[str, Any]) -> nn.Module:
    """On meta, without running weight init; again with init if a builder needs the writes."""
    import timm

    try:
        with torch.device("meta"), SkipValueWrites():
            return timm.create_model(timm_name, **kwargs)  # type: ignore[no-any-return]
    except Exception:
        with torch.device("meta"):
            return timm.create_model(timm_name, **kwargs)  # type: ignore[no-any-return]


def build_uninitialised(make: Callable[[], nn.Module]) -> nn.Module:
    """``make()`` without weight init; normally, from the same random state, if the builder raises (reads
    its init) or a parameter would not be in the state dict (so not overwritten by the checkpoint)."""
    try:
        with torch.random.fork_rng(devices=[]), SkipInit():
            model = make()
        if {k for k, _ in model.named_parameters(remove_duplicate=False)} <= model.state_dict().keys():
            return model
    except Exception:
        pass
    return make()


def check_weights(spec: ModelSpec, meta_model: nn.Module | None, model_name: str) -> None:
    """Before any real work: weight options that contradict, a checkpoint that is missing or does not fit
    (names and shapes only, against the meta model when there is one)."""
    if spec.pretrained and spec.checkpoint is not None:
        raise UsageError("--pretrained and --checkpoint both give weights.", "Pass only one of them.")
    if not 0 <= spec.seed <= SEED_MAX:
        raise UsageError(
            f"--seed {spec.seed} is out of range.", f"Use a seed from 0 to {SEED_MAX} (2**64 - 1)."
        )
    if spec.checkpoint is not None:
        state = read_checkpoint(spec.checkpoint, meta=True)
        if meta_model is not None:
            check_fits(state, meta_model, spec.checkpoint, model_name)


def load_checkpoint(model: nn.Module, path: Path, model_name: str) -> None:
    """Load a checkpoint strictly, with a readable diff of keys and shapes when it does not fit."""
    state = read_checkpoint(path)
    check_fits(state, model, path, model_name)
    model.load_state_dict(state, strict=True)


def resolve_device(spec: str) -> torch.device:
    """``auto`` picks CUDA when present; ``cuda``/``cuda:N`` must exist."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise UsageError(f"Unknown device `{spec}`.", "Use auto, cpu, cuda or cuda:N.") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"--device {spec}: CUDA is not available on this machine (torch {torch.__version__}).",
                "Use --device cpu, or --device auto to use a GPU only when there is one.",
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UsageError(
                f"--device {spec}: this machine has {count} CUDA device(s).",
                f"Use cuda:0 ... cuda:{count - 1}.",
            )
    elif device.type != "cpu":
        raise UsageError(f"Device `{spec}` is not supported.", "Use auto, cpu, cuda or cuda:N.")
    return device


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
        note = (
            f"weights: random init from --seed {spec.seed} (pass --checkpoint PATH or --pretrained for"
            " trained weights)"
        )
    return model, [note]
