"""torchvision's classification models as ``tv:NAME``: ``torchvision.models.get_model(NAME)`` with seeded
random weights, a ``--checkpoint`` state dict, or ``--pretrained`` (the model's DEFAULT weights, from
torch.hub's cache or its download); the eval transform of those weights, else ImageNet's defaults."""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...errors import InputError, did_you_mean
from .. import featlevels
from ..args import format_model_args
from ..meta import SkipValueWrites
from ..spec import ModelSpec, ResolvedName
from ..statediff import check_fits
from ..weights import build_uninitialised, check_hookable, check_weights, load_checkpoint, random_note
from .base import Source

PREFIX = "tv:"

#: What torchvision's classification weights were trained with, when no weights say otherwise.
IMAGENET_DEFAULTS: dict[str, Any] = {
    "resize": 256,
    "input_size": (3, 224, 224),
    "mean": (0.485, 0.456, 0.406),
    "std": (0.229, 0.224, 0.225),
    "interpolation": "bilinear",
}


def classification_models() -> list[str]:
    """torchvision's image classification models (``torchvision.models.list_models(torchvision.models)``)."""
    import torchvision

    return list(torchvision.models.list_models(module=torchvision.models))


def resolve(spec: ModelSpec) -> ResolvedName:
    """``tv:NAME`` checked against torchvision's classification models, with a did-you-mean."""
    import torchvision

    name = spec.name[len(PREFIX) :]
    known = classification_models()
    if name in known:
        return ResolvedName(spec.name, None, [])
    if name in torchvision.models.list_models():
        raise InputError(
            f"Model `{spec.name}` is one of torchvision's detection, segmentation, video or optical-flow"
            " models: hookdump takes its image classification models.",
            "`python -c 'import torchvision; print(torchvision.models.list_models(torchvision.models))'`"
            " lists them (tv:resnet18, tv:vit_b_16, ...).",
        )
    close = did_you_mean(name, known)
    close = close.replace("Did you mean: ", "Did you mean: tv:").replace(", ", ", tv:") if close else ""
    raise InputError(
        f"Unknown model `{spec.name}`: torchvision has no classification model `{name}`.",
        f"{close} `python -c 'import torchvision; print(torchvision.models.list_models(torchvision.models))'`"
        " lists them.".strip(),
    )


#: The builders that warn (FutureWarning) when ``init_weights`` is left to its default, which is True today:
#: given explicitly, the same weights come without torchvision's words on stderr.
INIT_WEIGHTS = ("googlenet", "inception_v3")


def _make(name: str, args: dict[str, Any]) -> Callable[[], nn.Module]:
    if name in INIT_WEIGHTS:
        args = {"init_weights": True, **args}

    def make() -> nn.Module:
        import torchvision

        with warnings.catch_warnings():  # what the user must know is said in hookdump's notes
            warnings.simplefilter("ignore", FutureWarning)
            model: nn.Module = torchvision.models.get_model(name, weights=None, **args)
        return model

    return make


def build_meta(spec: ModelSpec) -> nn.Module:
    """The model on the meta device, without running its weight init (again with it if the builder needs
    the writes)."""
    make = _make(spec.name[len(PREFIX) :], dict(spec.model_args))
    try:
        with torch.device("meta"), SkipValueWrites():
            return facts(make())
    except Exception:
        with torch.device("meta"):
            return facts(make())


def _build(spec: ModelSpec, skip_init: bool) -> nn.Module:
    make = _make(spec.name[len(PREFIX) :], dict(spec.model_args))
    try:
        model = build_uninitialised(make) if skip_init else make()
    except Exception as exc:
        given = " ".join(format_model_args(spec.model_args))
        fix = (
            f"Check the --model-arg values ({given}): they are keywords of torchvision.models.get_model."
            if given
            else "This is an error in torchvision's model code; HOOKDUMP_DEBUG=1 shows the traceback."
        )
        text = f"torchvision's builder of `{spec.name}` raised {type(exc).__name__}: {exc}"
        raise InputError(text, fix) from exc
    check_hookable(model, spec.name)
    return facts(model)


def facts(model: nn.Module) -> nn.Module:
    """What timm models say of themselves, under timm's names (plain attributes: the state dict does not
    change): torchvision's ViT has one class token ahead of the patches (``class_token``) and its encoder
    layers as feature levels; a ResNet-like model (``layer1`` ... ``layer4``) its four stages."""
    if isinstance(getattr(model, "class_token", None), torch.Tensor) and hasattr(model, "encoder"):
        width, patch = int(getattr(model, "hidden_dim", 0)), int(getattr(model, "patch_size", 1))
        levels = featlevels.block_levels(model, "encoder.layers", width, patch)
        setattr(model, "num_prefix_tokens", 1)  # noqa: B010  (plain attributes)
        object.__setattr__(model, "cls_token", model.get_parameter("class_token"))
    else:
        levels = featlevels.stage_levels(model)
    if levels:
        setattr(model, "feature_info", levels)  # noqa: B010
    return model


def load(spec: ModelSpec) -> tuple[nn.Module, list[str]]:
    """The real model on the CPU with its weights, and what to say about them (random ones from ``spec.seed``,
    without touching the caller's random state)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = _build(spec, skip_init=spec.checkpoint is not None or spec.pretrained)
    if spec.checkpoint is not None:
        load_checkpoint(model, spec.checkpoint, spec.name)
        return model, [f"weights: {spec.checkpoint}"]
    if spec.pretrained:
        weights = default_weights(spec)
        state, where = download(weights, spec.name)
        check_fits(state, model, Path(where), spec.name)
        model.load_state_dict(state, strict=True)
        return model, [f"weights: torchvision {weights} ({where})"]
    return model, [random_note(spec.seed)]


def default_weights(spec: ModelSpec) -> Any:
    """The model's DEFAULT weight enum (``torchvision.models.get_model_weights(NAME).DEFAULT``)."""
    import torchvision

    return torchvision.models.get_model_weights(spec.name[len(PREFIX) :]).DEFAULT


def cached_path(weights: Any) -> Path:
    """Where torch.hub keeps (or would keep) the file of ``weights``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(str(weights.url))


def download(weights: Any, requested: str) -> tuple[dict[str, torch.Tensor], str]:
    """The state dict of ``weights`` from torch.hub's cache, or downloaded into it; a missing download is one
    error paragraph. torch.hub's own "Downloading: ..." line (on stdout, which holds data) is kept off the
    terminal."""
    path = cached_path(weights)
    where = f"from the cache, {path}" if path.is_file() else f"downloaded to {path}"
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            state: dict[str, torch.Tensor] = weights.get_state_dict(progress=False, check_hash=True)
    except Exception as exc:
        why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        raise InputError(
            f"Could not get torchvision's pretrained weights {weights} of `{requested}` from {weights.url}"
            f" ({why}), and they are not in torch.hub's cache ({path}).",
            "Download them once where there is network (torch.hub keeps them in that cache, which"
            " $TORCH_HOME moves), or pass --checkpoint PATH, a state dict file such as torch.save("
            f"torchvision.models.get_model('{requested[len(PREFIX) :]}', weights='DEFAULT').state_dict(),"
            " 'weights.pth') writes.",
        ) from exc
    return state, where


def transform(spec: ModelSpec) -> tuple[dict[str, Any], list[str]]:
    """The eval transform as a data config (``resize``: the shorter side before the center crop to
    ``input_size``), and a note when it is ImageNet's defaults: the weights' own ``transforms()`` with
    ``--pretrained``, else resize 256, crop 224, bilinear, ImageNet mean and std."""
    if not spec.pretrained:
        config: dict[str, Any] = {**IMAGENET_DEFAULTS, "from": "ImageNet defaults"}
        note = (
            "transform: ImageNet's defaults (resize 256, center crop 224, bilinear, ImageNet mean and std),"
            " as torchvision's classification weights use; --pretrained uses the weights' own transforms()"
        )
        return config | {"crop_pct": 224 / 256, "crop_mode": "center"}, [note]
    weights = default_weights(spec)
    made = weights.transforms()
    crop, resize = getattr(made, "crop_size", None), getattr(made, "resize_size", None)
    if not crop or not resize:
        raise InputError(
            f"The transform of {weights} ({type(made).__name__}) is not a resize and a center crop.",
            "Pass --checkpoint PATH instead of --pretrained: it uses ImageNet's resize 256 and crop 224.",
        )
    return {
        "resize": int(resize[0]),
        "input_size": (3, int(crop[0]), int(crop[-1])),
        "mean": tuple(made.mean),
        "std": tuple(made.std),
        "interpolation": str(made.interpolation.value),
        "crop_pct": int(crop[0]) / int(resize[0]),
        "crop_mode": "center",
        "from": f"torchvision {weights}.transforms()",
    }, []


def source(spec: ModelSpec) -> Source:
    name = resolve(spec)
    weights = str(default_weights(spec)) if spec.pretrained else None
    return Source(
        name,
        build_meta=lambda: build_meta(spec),
        load=lambda: load(spec),
        check_weights=lambda meta: check_weights(spec, meta, spec.name),
        preprocess=lambda needed: transform(spec),
        record={"source": "torchvision", "torchvision_name": spec.name[len(PREFIX) :], "weights": weights},
        rerun=spec.name,
    )
