"""open_clip's eval transform for an ``open_clip:`` model's architecture and tag, as hookdump's data config
(resize, center crop or squash, normalize), or the error naming what hookdump's transforms do not make."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ....errors import InputError
from .model import OpenCLIPModel


def data_config(found: OpenCLIPModel) -> tuple[dict[str, Any], list[str]]:
    """open_clip's eval transform for the architecture and tag as a data config: the shorter side to the
    tower's image size then a center crop (its ``shortest`` mode), or a squash; its mean and std."""
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict  # the optional extra, where used

    cfg = merge_preprocess_dict(asdict(PreprocessCfg()), found.config.get("preprocess_cfg", {}))
    cfg = merge_preprocess_dict(cfg, found.tag_config)
    size = found.vision.get("image_size", cfg["size"])
    height, width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    label = f"open_clip's preprocess of {found.arch}" + (f":{found.tag}" if found.tag else "")
    config: dict[str, Any] = {
        "input_size": (3, height, width), "mean": tuple(cfg["mean"]), "std": tuple(cfg["std"]),
        "interpolation": str(cfg["interpolation"]), "from": label,
    }  # fmt: skip
    mode = cfg["resize_mode"]
    if mode == "shortest" and height == width:
        config |= {"resize": height, "crop_pct": 1.0, "crop_mode": "center"}
        said = f"shorter side to {height}, center crop {height}x{width}"
    elif mode == "squash":
        config |= {"crop_pct": 1.0, "crop_mode": "squash"}
        said = f"resize to {height}x{width}"
    else:
        raise InputError(
            f"{label} resizes in open_clip's `{mode}` mode at {height}x{width}, which hookdump's eval"
            " transforms (resize, center crop, normalize) do not make.",
            "In Python, pass open_clip's own preprocess: _, _, preprocess ="
            f" open_clip.create_model_and_transforms('{found.arch}'); hookdump.api.capture(..., model="
            "model.visual, transform=preprocess).",
        )
    note = (
        f"transform: {label}: {said} ({config['interpolation']}), mean"
        f" {[round(v, 4) for v in config['mean']]}, std {[round(v, 4) for v in config['std']]}"
    )
    return config, [note]
