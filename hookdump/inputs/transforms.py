"""The eval transform of a model as a data config (``input_size``, ``mean``, ``std``, ``interpolation``,
``crop_pct``; ``resize`` for torchvision's; ``callable`` for a caller's own), in order of precedence: the
caller's ``transform=``, the model source's own (torchvision's weights), timm's data config of the model;
and the transform that config makes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from ..model.spec import ModelSpec
from ..units import human_bytes
from .images import open_image


def data_config(model: nn.Module, input_size: tuple[int, int, int] | None) -> dict[str, Any]:
    """timm's eval data config for this model, with ``--input-size`` applied, and the channels of the model's
    first conv (``--model-arg in_chans=1``) where timm's config keeps 3; a mean and std of another channel
    count are averaged to this one's."""
    from timm.data import resolve_data_config

    config: dict[str, Any] = dict(resolve_data_config({}, model=model))
    if input_size is not None:
        _check_fits_memory(input_size)
        config["input_size"] = tuple(input_size)
    elif chans := _first_conv_channels(model):
        config["input_size"] = (chans, *config["input_size"][1:])
    count = config["input_size"][0]
    for key in ("mean", "std"):
        if len(config[key]) != count:
            config[key] = (sum(config[key]) / len(config[key]),) * count
    return config


def fixed_config(config: dict[str, Any], input_size: tuple[int, int, int] | None) -> dict[str, Any]:
    """A data config a model source gave (torchvision's: ``resize`` then a center crop), with
    ``--input-size`` applied: the crop is that size, the resize keeps its ratio to the crop (``crop_pct``)."""
    config = dict(config)
    if input_size is not None:
        _check_fits_memory(input_size)
        config["input_size"] = tuple(input_size)
        if "resize" in config:
            config["resize"] = int(min(input_size[1:]) / config["crop_pct"])
    count = config["input_size"][0]
    for key in ("mean", "std"):
        if len(config[key]) != count:
            config[key] = (sum(config[key]) / len(config[key]),) * count
    return config


#: The image a caller's transform is tried on when there is no input to try it on (--random-input).
PROBE_SIZE = (256, 256)


def callable_config(
    transform: Callable[[Any], torch.Tensor], paths: list[Path], input_size: tuple[int, int, int] | None
) -> dict[str, Any]:
    """A caller's eval transform (a PIL image to a ``(C, H, W)`` float tensor) as a data config: its input
    size is what it makes of the first input (a grey image without one), unless ``input_size`` is given;
    mean, std and the rest are the transform's own business (None)."""
    from PIL import Image

    where = f"`{paths[0]}`" if paths else f"a grey {PROBE_SIZE[0]}x{PROBE_SIZE[1]} image"
    image = open_image(paths[0], "RGB") if paths else Image.new("RGB", PROBE_SIZE, (128, 128, 128))
    try:
        made = transform(image)
    except Exception as exc:
        raise UsageError(
            f"transform= raised {type(exc).__name__} on {where}: {exc}",
            "Pass a callable that takes a PIL image (RGB) and returns a (C, H, W) float tensor.",
        ) from exc
    if not isinstance(made, torch.Tensor) or made.dim() != 3 or not made.is_floating_point():
        what = (
            f"a {made.dim()}-D {made.dtype} tensor" if isinstance(made, torch.Tensor) else type(made).__name__
        )
        raise UsageError(
            f"transform= made {what} of {where}: hookdump stacks (C, H, W) float tensors into batches.",
            "End the transform with ToTensor() (or a float conversion) and Normalize(mean, std).",
        )
    size = tuple(input_size) if input_size is not None else tuple(made.shape)
    if input_size is not None:
        _check_fits_memory(input_size)
    if paths and size != tuple(made.shape):  # the inputs would reach the model at another size than planned
        raise UsageError(
            f"transform= made {tuple(made.shape)} of {where}, and the input size given is {size}.",
            "Leave the input size out (the transform's size is used), or make the transform give it.",
        )
    kind = f"{type(transform).__module__}.{type(transform).__qualname__}"
    return {
        "input_size": size, "mean": None, "std": None, "interpolation": None, "crop_pct": None,
        "crop_mode": None, "callable": transform, "from": f"transform= ({kind})",
    }  # fmt: skip


def _first_conv_channels(model: nn.Module) -> int | None:
    """The input channels of the model's first conv, as its timm config names it (None when it does not)."""
    name = (getattr(model, "pretrained_cfg", None) or {}).get("first_conv")
    try:
        channels = getattr(model.get_submodule(name), "in_channels", None) if isinstance(name, str) else None
    except AttributeError:
        return None
    return channels if isinstance(channels, int) else None


def _check_fits_memory(input_size: tuple[int, int, int]) -> None:
    """Refuse an ``--input-size`` of which one image alone would not fit in the machine's memory."""
    needed = 4 * input_size[0] * input_size[1] * input_size[2]
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on this system
        return
    if needed > memory:
        raise UsageError(
            f"--input-size {','.join(map(str, input_size))}: one image of that size takes"
            f" {human_bytes(needed)}, more than this machine's {human_bytes(memory)} of memory.",
            "Use a smaller --input-size (or leave it out for the model's own).",
        )


def model_mode(config: dict[str, Any]) -> str:
    """The PIL mode the model's images are decoded to: a caller's transform always gets RGB."""
    if config.get("callable") is not None:
        return "RGB"
    return "L" if config["input_size"][0] == 1 else "RGB"


_READING = ("image_key", "label_column")  # config keys of how inputs are read, not transformed


def eval_transform(config: dict[str, Any]) -> Callable[[Any], torch.Tensor]:
    """The model's own eval transform (resize, center crop, normalize): the caller's (``callable``),
    torchvision's (a ``resize``, as its weights' ``transforms()`` do it), else timm's."""
    if config.get("callable") is not None:
        return config["callable"]  # type: ignore[no-any-return]
    if "resize" in config:
        return ResizeCrop(config)
    from timm.data import create_transform

    timm_config = {k: v for k, v in config.items() if k not in _READING}
    return create_transform(**timm_config, is_training=False)  # type: ignore[no-any-return]


class ResizeCrop:
    """torchvision's ``ImageClassification`` eval transform on a PIL image, from a data config: the
    shorter side resized to ``resize`` (antialiased), the center ``input_size`` cropped, scaled to [0, 1],
    normalized."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.resize = int(config["resize"])
        self.crop = [int(config["input_size"][1]), int(config["input_size"][2])]
        self.mean, self.std = list(config["mean"]), list(config["std"])
        self.interpolation = str(config["interpolation"])

    def __call__(self, image: Any) -> torch.Tensor:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as F

        mode = InterpolationMode(self.interpolation)
        image = F.resize(image, [self.resize], interpolation=mode, antialias=True)
        image = F.center_crop(image, self.crop)
        tensor = F.convert_image_dtype(F.pil_to_tensor(image), torch.float)
        normalized: torch.Tensor = F.normalize(tensor, mean=self.mean, std=self.std)
        return normalized


def eval_config(
    preprocess: Callable[[tuple[str, ...]], tuple[dict[str, Any] | None, list[str]]],
    spec: ModelSpec,
    build_meta: Callable[[], torch.nn.Module],
    build_real: Callable[[], torch.nn.Module],
    size: tuple[int, int, int] | None,
    paths: list[Path],
    needed: tuple[str, ...],
) -> tuple[dict[str, Any], list[str]]:
    """The eval transform as a data config, in order: the caller's ``transform``, the source's own
    (``preprocess``: its model source's, e.g. torchvision's), timm's data config of the model (its
    ``pretrained_cfg``); and notes about it.
    ``needed``: what a caller's module must say when it has no transform (``input size``, ``mean``, ...)."""
    if spec.transform is not None:
        return callable_config(spec.transform, paths, size), []
    given, notes = preprocess(needed)
    if given is not None:
        return fixed_config(given, size), notes
    try:
        module = build_meta()
    except Exception:
        module = build_real()
    return data_config(module, size), notes
