"""What a finished capture's ``manifest.json`` says beyond its tensors: versions, model, weights,
transform, inputs, and every option as ``hookdump capture`` takes it, so the same files can be made again."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Any

import numpy
import PIL
import timm
import torch

from ..digest import sha256
from ..model.args import format_model_args
from ..store.folder.manifest import SCHEMA_VERSION
from ..version import __version__

if TYPE_CHECKING:  # types only: the header is built by a run that has them all loaded
    from ..inputs.spec import InputSpec
    from ..model.spec import ModelSpec, ResolvedName
    from .options import CaptureOptions


def options_record(
    source: InputSpec,
    layer_specs: list[str],
    spec: ModelSpec,
    opts: CaptureOptions,
    model: str | None = None,
) -> dict[str, Any]:
    """The options as ``--config`` keys (the long option names): ``--config manifest.json`` reruns them.

    Relative paths are as given, relative to the manifest's ``cwd``; ``overwrite`` is not kept, so a rerun
    into the same folder must ask for it again. ``model``: what the source says instead of ``spec.name``
    (a caller's module: its class and state-dict digest, so ``--resume`` refuses another module).
    """
    size = source.input_size
    return {
        "images": list(source.paths),
        "sample": source.sample,
        "random_input": source.random,
        "seed": spec.seed,
        "input_size": ",".join(map(str, size)) if size else None,
        "layer": list(layer_specs),
        "model": model or spec.name,
        "import": list(spec.imports),
        "model_arg": format_model_args(spec.model_args),
        "checkpoint": str(spec.checkpoint) if spec.checkpoint else None,
        "pretrained": spec.pretrained,
        "out": str(opts.out),
        "format": ",".join(opts.formats),
        "what": opts.what,
        "grad": opts.grad,
        "target": opts.target,
        "device": opts.device,
        "dtype": opts.dtype,
        "channels_last": opts.channels_last,
        "save_dtype": opts.save_dtype,
        "batch_size": opts.batch_size,
        "early_stop": opts.early_stop,
        "reduce": opts.reduce,
        "shard_size": opts.shard_size,
        **({"zarr_chunk": opts.zarr_chunk} if opts.zarr_chunk is not None else {}),  # (absent: as --compile)
        **({"max_queue_mb": opts.max_queue_mb} if opts.max_queue_mb is not None else {}),  # (likewise)
        "skip_bad": opts.skip_bad,
        "workers": opts.workers,
        "shard": opts.shard,
        "attention": opts.attention,
        **({"compile": True} if opts.compile else {}),  # absent when off: --resume of older captures works
        **({"image_key": source.image_key} if source.image_key else {}),  # (of tar shard samples) likewise
        **({"image_column": source.image_column} if source.image_column else {}),  # (of tables)
        **({"label_column": source.label_column} if source.label_column else {}),
    }


def header(
    spec: ModelSpec,
    name: ResolvedName,
    device: str,
    config: dict[str, Any],
    records: list[dict[str, Any]],
    options: dict[str, Any],
    run: dict[str, Any],
) -> dict[str, Any]:
    """Everything in manifest.json but the tensors."""
    checkpoint = spec.checkpoint
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": True,
        "hookdump_version": __version__,
        "torch_version": torch.__version__,
        "timm_version": timm.__version__,
        "numpy_version": numpy.__version__,
        "pillow_version": PIL.__version__,
        "python_version": platform.python_version(),
        "cwd": os.getcwd(),
        "options": options,
        "model": {
            "requested": name.requested,
            "timm_name": name.timm_name,
            "imports": list(spec.imports),
            "args": dict(spec.model_args),
            "checkpoint": str(checkpoint) if checkpoint else None,
            "checkpoint_sha256": sha256(checkpoint) if checkpoint else None,
            "pretrained": spec.pretrained,
            "seed": None if checkpoint or spec.pretrained or spec.module is not None else spec.seed,
        },
        "device": device,
        "dtype": options["dtype"],
        "transform": transform_record(config),
        "inputs": records,
        **run,
    }


def transform_record(config: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``transform``: input size, mean, std, interpolation, crop; torchvision's ``resize``
    (the shorter side before the crop); a caller's transform as its ``repr``; where it came from."""
    record = {
        "input_size": list(config["input_size"]),
        "mean": _listed(config["mean"]),
        "std": _listed(config["std"]),
        "interpolation": config["interpolation"],
        "crop_pct": config["crop_pct"],
        "crop_mode": config.get("crop_mode", "center"),
    }
    if "resize" in config:
        record["resize"] = config["resize"]
    if config.get("callable") is not None:
        record["callable"] = repr(config["callable"])[:2000]
    if "from" in config:
        record["from"] = config["from"]
    return record


def _listed(values: Any) -> list[float] | None:
    return None if values is None else list(values)
