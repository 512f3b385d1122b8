"""The eval transform of an ``hf:`` model, from the image processor beside it
(``AutoImageProcessor.from_pretrained``) as a data config hookdump's loader runs: the processor's
``shortest_edge`` resize and center crop as torchvision's resize-and-crop (``resize``), its ``height`` x
``width`` resize as timm's ``squash``; rescale by 1/255, its mean and std. Where there is no processor,
ImageNet's defaults at the config's ``image_size``, said in a note."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ....errors import InputError
from .model import HFModel, transformers_module

#: PIL's resampling filters (transformers' ``resample``) by the names timm and torchvision take.
RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SIZE_KEYS = ("height", "width", "shortest_edge", "longest_edge", "max_height", "max_width")


def data_config(found: HFModel) -> tuple[dict[str, Any], list[str]]:
    """The model's eval transform as a data config, and what to say about it (read once per model)."""
    if found.transform is None:
        found.transform = _data_config(found)
    config, notes = found.transform
    return dict(config), list(notes)


def input_size(found: HFModel) -> tuple[int, int, int]:
    size: tuple[int, int, int] = tuple(data_config(found)[0]["input_size"])
    return size


def _data_config(found: HFModel) -> tuple[dict[str, Any], list[str]]:
    channels = int(getattr(found.config, "num_channels", 3) or 3)
    processor = _processor(found)
    if processor is None:
        return _defaults(found, channels)
    return from_processor(processor, channels, f"{type(processor).__name__} of {found.source}")


def _processor(found: HFModel) -> Any | None:
    if found.folder is not None and not (found.folder / "preprocessor_config.json").is_file():
        return None
    tf = transformers_module()
    try:
        return tf.AutoImageProcessor.from_pretrained(found.source, local_files_only=found.offline)
    except (OSError, ValueError, KeyError) as exc:
        if found.folder is None:
            return None  # a hub model without a processor: ImageNet's defaults, said in a note
        raise InputError(
            f"transformers cannot read the image processor in {found.folder}: {type(exc).__name__}: {exc}",
            "Save it again with AutoImageProcessor.save_pretrained(FOLDER), or delete"
            " preprocessor_config.json for ImageNet's defaults.",
        ) from exc


def _defaults(found: HFModel, channels: int) -> tuple[dict[str, Any], list[str]]:
    size = getattr(found.config, "image_size", None) or 224
    side = int(size[0] if isinstance(size, (list, tuple)) else size)
    resize = side * 256 // 224
    config = {
        "resize": resize, "input_size": (channels, side, side), "mean": IMAGENET_MEAN, "std": IMAGENET_STD,
        "interpolation": "bilinear", "crop_pct": side / resize, "crop_mode": "center",
        "from": f"ImageNet defaults at the config's image_size {side}",
    }  # fmt: skip
    note = (
        f"transform: {found.source} has no image processor (preprocessor_config.json): ImageNet's defaults at"
        f" the config's image_size, resize {resize}, center crop {side}, bilinear, ImageNet mean and std"
    )
    return config, [note]


def _size(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    items = value.items() if isinstance(value, Mapping) else ((k, getattr(value, k, None)) for k in SIZE_KEYS)
    return {k: int(v) for k, v in items if v is not None}


def from_processor(processor: Any, channels: int, label: str) -> tuple[dict[str, Any], list[str]]:
    """An image processor's eval steps as a data config; one it cannot be (padding, no resize, a size that
    varies, another rescale) is refused with the fix."""

    def value(key: str, default: Any = None) -> Any:
        found = getattr(processor, key, None)
        return default if found is None else found

    if not value("do_resize", True) or value("do_pad", False):
        raise _refused(label, "pads, or keeps each image's own size")
    if not value("do_rescale", True) or abs(float(value("rescale_factor", 1 / 255)) - 1 / 255) > 1e-9:
        raise _refused(label, f"rescales by {value('rescale_factor')} (hookdump's transforms scale by 1/255)")
    interpolation = RESAMPLE.get(int(value("resample", 2)), "bilinear")
    normalize = value("do_normalize", True)
    mean = tuple(float(v) for v in value("image_mean")) if normalize else (0.0,) * channels
    std = tuple(float(v) for v in value("image_std")) if normalize else (1.0,) * channels
    size = _size(value("size"))
    crop = _size(value("crop_size")) if value("do_center_crop", False) else {}
    crop_pct = value("crop_pct", None)
    short = size.get("shortest_edge")
    config: dict[str, Any] = {"mean": mean, "std": std, "interpolation": interpolation}
    if short and crop_pct and not crop:  # ConvNeXt: the shorter side to S / crop_pct, then an S x S crop
        if short < 384:
            crop, short = {"height": short, "width": short}, int(short / float(crop_pct))
        else:
            size = {"height": short, "width": short}
            short = None
    if short and not size.get("longest_edge") and crop:
        config |= {"resize": short, "input_size": (channels, crop["height"], crop["width"]), "from": label}
        config |= {"crop_pct": crop["height"] / short, "crop_mode": "center"}
        said = f"shorter side to {short}, center crop {crop['height']}x{crop['width']}"
    elif "height" in size and "width" in size and not short:
        height, width = size["height"], size["width"]
        out = (crop.get("height", height), crop.get("width", width))
        if out[0] / height != out[1] / width or int(out[0] / (out[0] / height)) != height:
            raise _refused(label, f"crops {out[0]}x{out[1]} out of {height}x{width}, unevenly")
        config |= {"input_size": (channels, *out), "crop_pct": out[0] / height, "crop_mode": "squash"}
        said = f"resize to {height}x{width}" + (f", center crop {out[0]}x{out[1]}" if crop else "")
    else:
        raise _refused(label, f"resizes to {size or 'no fixed size'}, which gives images of varying sizes")
    note = (
        f"transform: {label}: {said} ({interpolation}), rescale 1/255, mean"
        f" {[round(v, 4) for v in mean]}, std {[round(v, 4) for v in std]}"
    )
    return config, [note]


def _refused(label: str, what: str) -> InputError:
    return InputError(
        f"The image processor ({label}) {what}: hookdump's eval transforms resize, center-crop, scale by"
        " 1/255 and normalize.",
        "In Python, pass the processor as the transform: hookdump.api.capture(..., transform=lambda image:"
        " processor(images=image, return_tensors='pt')['pixel_values'][0]).",
    )
