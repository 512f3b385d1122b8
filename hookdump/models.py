"""From a model name (timm name, Twins alias or plugin) plus weights to an ``nn.Module``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import InputError, UsageError, did_you_mean
from .meta import SkipInit, SkipValueWrites

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

CHECKPOINT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")


@dataclass(frozen=True)
class ModelSpec:
    """Which model to build and with which weights; shared by every command."""

    name: str = DEFAULT_MODEL
    imports: tuple[str, ...] = ()
    checkpoint: Path | None = None
    pretrained: bool = False
    name_given: bool = True
    seed: int = 0  # random weights are drawn from this seed, so a run without trained weights repeats


@dataclass
class ResolvedName:
    """A requested model name and the timm name it builds, with what to tell the user."""

    requested: str
    timm_name: str
    notes: list[str] = field(default_factory=list)


def import_plugins(specs: tuple[str, ...]) -> None:
    """Import user modules or ``.py`` files that register models with timm."""
    for spec in specs:
        path = Path(spec)
        try:
            if spec.endswith(".py") or path.is_file():
                _import_file(path)
            else:
                importlib.import_module(spec)
        except InputError:
            raise
        except BaseException as exc:  # SyntaxError, SystemExit and friends from user code
            raise InputError(
                f"Could not import plugin `{spec}`: {type(exc).__name__}: {exc}",
                "Fix the plugin so that `python -c 'import ...'` works, or drop --import.",
            ) from exc


def _import_file(path: Path) -> None:
    if not path.is_file():
        raise InputError(
            f"Plugin file `{path}` does not exist.", "Pass an existing .py file or a module name."
        )
    module_name = f"hookdump_plugin_{path.stem}"
    if module_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(module_name, path.resolve())
    if spec is None or spec.loader is None:
        raise InputError(f"Plugin `{path}` cannot be loaded as Python.", "Pass a .py file or a module name.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    finally:
        sys.path.remove(str(path.resolve().parent))


def resolve_name(spec: ModelSpec) -> ResolvedName:
    """Import plugins, then map the requested name onto a registered timm model."""
    import timm

    import_plugins(spec.imports)
    name = spec.name
    notes = [] if spec.name_given else [f"no model given: using the default, {DEFAULT_MODEL}"]
    if name.startswith(("hf-hub:", "hf_hub:", "local-dir:")) or timm.is_model(name):
        return ResolvedName(name, name, notes)
    if name in ALIASES:
        timm_name = ALIASES[name]
        notes.append(f"model {name} is the Twins repository's name for timm's {timm_name}")
        return ResolvedName(name, timm_name, notes)
    close = did_you_mean(name, sorted(set(timm.list_models()) | set(ALIASES)))
    hint = (
        "`python -c 'import timm; print(timm.list_models(\"*name*\"))'` lists timm's models;"
        " --import MODULE_OR_FILE adds your own."
    )
    raise InputError(f"Unknown model `{name}`: timm has no model of that name.", f"{close} {hint}".strip())


def build(
    timm_name: str, *, pretrained: bool = False, meta: bool = False, skip_init: bool = False
) -> nn.Module:
    """Create the model with timm; on the meta device when ``meta`` (no weights allocated); without weight
    init when ``skip_init`` (parameters left uninitialised: a checkpoint is loaded over them)."""
    import timm

    try:
        if meta or skip_init:
            model = _build_meta(timm_name) if meta else _build_uninitialised(timm_name)
        else:
            model = timm.create_model(timm_name, pretrained=pretrained)
    except Exception as exc:
        if meta:
            raise
        if pretrained:
            raise InputError(
                f"Could not get the pretrained weights of `{timm_name}`: {type(exc).__name__}: {exc}",
                "They come from the Hugging Face hub, which this machine cannot reach (or which has no"
                " weights for this name). Download them once where there is network (they are cached in"
                " ~/.cache/huggingface) or pass --checkpoint PATH. Offline, HF_HUB_OFFLINE=1 makes this"
                " check answer at once instead of retrying.",
            ) from exc
        raise InputError(
            f"The model builder of `{timm_name}` raised {type(exc).__name__}: {exc}",
            "If it is a plugin written for an older timm, let its builder accept **kwargs"
            " (timm passes pretrained_cfg and friends).",
        ) from exc
    check_hookable(model, timm_name)
    return model


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


def _build_meta(timm_name: str) -> nn.Module:
    """On meta, without running weight init; again with init if a builder needs the writes."""
    import timm

    try:
        with torch.device("meta"), SkipValueWrites():
            return timm.create_model(timm_name)  # type: ignore[no-any-return]
    except Exception:
        with torch.device("meta"):
            return timm.create_model(timm_name)  # type: ignore[no-any-return]


def _build_uninitialised(timm_name: str) -> nn.Module:
    """Without weight init; normally, from the same random state, if the builder raises (reads its init) or
    a parameter would not be in the state dict (so not overwritten by the checkpoint)."""
    import timm

    try:
        with torch.random.fork_rng(devices=[]), SkipInit():
            model: nn.Module = timm.create_model(timm_name)
        if {k for k, _ in model.named_parameters(remove_duplicate=False)} <= model.state_dict().keys():
            return model
    except Exception:
        pass
    return timm.create_model(timm_name)  # type: ignore[no-any-return]


def read_checkpoint(path: Path, *, meta: bool = False) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors`` or a ``torch.load``-able file (``weights_only=True``).

    With ``meta``, only names and shapes are read (tensors on the meta device): a fast check before any work.
    """
    if not path.is_file():
        raise InputError(
            f"Checkpoint `{path}` does not exist.", "Pass the path of a .safetensors or .pth file."
        )
    if path.suffix not in CHECKPOINT_SUFFIXES:
        raise InputError(
            f"Checkpoint `{path}` has an unknown extension `{path.suffix}`.",
            f"hookdump reads {', '.join(CHECKPOINT_SUFFIXES)}.",
        )
    try:
        if path.suffix == ".safetensors":
            obj: Any = _read_safetensors(path, meta)
        else:
            obj = torch.load(path, map_location="meta" if meta else "cpu", weights_only=True)
    except Exception as exc:
        raise InputError(
            f"Could not read checkpoint `{path}`: {type(exc).__name__}: {str(exc).splitlines()[0]}",
            "hookdump loads .pth/.pt/.bin with torch.load(weights_only=True): save a plain state_dict"
            " (torch.save(model.state_dict(), path)) or a .safetensors file.",
        ) from exc
    return _unwrap_state_dict(obj, path)


def _read_safetensors(path: Path, meta: bool) -> dict[str, torch.Tensor]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not meta:
        return load_file(str(path), device="cpu")
    with safe_open(str(path), framework="pt") as handle:
        names: list[str] = list(handle.keys())
        return {k: torch.empty(handle.get_slice(k).get_shape(), device="meta") for k in names}


def _unwrap_state_dict(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    for key in ("state_dict", "model", "model_state_dict", "state_dict_ema"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise InputError(
            f"Checkpoint `{path}` does not hold a state dict (a mapping of names to tensors).",
            "Save one with torch.save(model.state_dict(), path).",
        )
    if obj and all(k.startswith("module.") for k in obj):
        obj = {k[len("module.") :]: v for k, v in obj.items()}
    return dict(obj)


def check_fits(state: dict[str, torch.Tensor], model: nn.Module, path: Path, model_name: str) -> None:
    """A readable diff of keys and shapes when a checkpoint does not fit the model (strict loading)."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        lines = [f"Checkpoint `{path}` does not fit {model_name}:"]
        for title, keys in (
            ("missing (in the model, not in the file)", missing),
            ("unexpected (in the file, not in the model)", unexpected),
            ("shape mismatch", shapes),
        ):
            if keys:
                more = f", ... and {len(keys) - 6} more" if len(keys) > 6 else ""
                lines.append(f"  {len(keys)} {title}: {', '.join(keys[:6])}{more}")
        raise InputError(
            "\n".join(lines),
            "Pass the --model the checkpoint was trained as (and its number of classes).",
        )


def check_weights(spec: ModelSpec, meta_model: nn.Module | None, model_name: str) -> None:
    """Before any real work: weight options that contradict, a checkpoint that is missing or does not fit
    (names and shapes only, against the meta model when there is one)."""
    if spec.pretrained and spec.checkpoint is not None:
        raise UsageError("--pretrained and --checkpoint both give weights.", "Pass only one of them.")
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
        model = build(timm_name, pretrained=spec.pretrained, skip_init=skip_init)
    if spec.checkpoint is not None:
        load_checkpoint(model, spec.checkpoint, timm_name)
        note = f"weights: {spec.checkpoint}"
    elif spec.pretrained:
        note = "weights: timm pretrained"
    else:
        note = (
            f"weights: random init from --seed {spec.seed} (pass --checkpoint PATH or --pretrained for"
            " trained weights)"
        )
    return model, [note]
