"""What ``manifest.json`` says about a capture beyond its tensors: versions, model, weights, transform,
inputs, and every option as ``hookdump capture`` takes it, so the same files can be made again."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .errors import InputError
from .modelargs import format_model_args

if TYPE_CHECKING:  # kept out at run time: reading a capture back (reader.py) needs no torch
    from .inputs import InputSpec
    from .models import ModelSpec, ResolvedName
    from .options import CaptureOptions

MANIFEST = "manifest.json"
SCHEMA_VERSION = 2


def inside(folder: Path, name: object, listed_in: str = MANIFEST) -> Path:
    """``folder / name`` for a file name that ``listed_in`` (manifest.json, progress.json) gives; an
    InputError when the name would lead out of ``folder`` (a `/`, `..`, an absolute path, NUL): hookdump
    reads and writes only inside the folder it was given, whatever a hand-edited file says."""
    text = str(name)
    if text in ("", ".", "..") or "/" in text or "\0" in text:
        raise InputError(
            f"`{folder / listed_in}` lists the file `{text}`, which is not a file in `{folder}`: hookdump"
            " reads and writes only inside that folder.",
            "The file was edited or damaged: capture again (hookdump capture ... --overwrite).",
        )
    return folder / text


def entry_stem(entry: dict[str, Any]) -> str:
    """A ``tensors`` entry's tensor name: the safetensors key, else the file name without its suffix."""
    if entry.get("format") == "safetensors":
        return str(entry["key"])
    return str(entry["file"]).removesuffix("." + str(entry["format"]))


#: The name ``show --rollout`` gives its picture in a capture folder (``picture_name(ROLLOUT, ...)``).
ROLLOUT = "rollout"


def picture_name(stem: str, image: int | None = None, suffix: str = "") -> str:
    """The PNG ``show`` draws of tensor ``stem`` (``/`` in a safetensors key becomes ``_``): image ``image``
    of the batch when given (``.img<i>``), ``suffix`` ``.overlay`` / ``.gradcam`` for a heat map."""
    return f"{stem.replace('/', '_')}{'' if image is None else f'.img{image}'}{suffix}.png"


def is_picture_of(name: str, stem: str) -> bool:
    """Whether a file ``name`` is one of the PNGs :func:`picture_name` gives tensor ``stem``."""
    own = re.escape(stem.replace("/", "_"))
    return re.fullmatch(rf"{own}(\.img\d+)?(\.overlay|\.gradcam)?\.png", name) is not None


def options_record(
    source: InputSpec, layer_specs: list[str], spec: ModelSpec, opts: CaptureOptions
) -> dict[str, Any]:
    """The options as ``--config`` keys (the long option names): ``--config manifest.json`` reruns them.

    Relative paths are as given, relative to the manifest's ``cwd``; ``overwrite`` is not kept, so a rerun
    into the same folder must ask for it again.
    """
    size = source.input_size
    return {
        "images": list(source.paths),
        "sample": source.sample,
        "random_input": source.random,
        "seed": spec.seed,
        "input_size": ",".join(map(str, size)) if size else None,
        "layer": list(layer_specs),
        "model": spec.name,
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
        "skip_bad": opts.skip_bad,
        "workers": opts.workers,
        "shard": opts.shard,
        "attention": opts.attention,
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
    import numpy
    import PIL
    import timm
    import torch

    from .digest import sha256

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
            "seed": None if checkpoint or spec.pretrained else spec.seed,
        },
        "device": device,
        "dtype": options["dtype"],
        "transform": {
            "input_size": list(config["input_size"]),
            "mean": list(config["mean"]),
            "std": list(config["std"]),
            "interpolation": config["interpolation"],
            "crop_pct": config["crop_pct"],
            "crop_mode": config.get("crop_mode", "center"),
        },
        "inputs": records,
        **run,
    }


def resume_advice(overwrite: bool) -> str:
    """How to go on after an interrupted capture; a run given --overwrite continues without it (--resume
    with --overwrite is refused)."""
    if overwrite:
        return (
            "rerun the same command with --resume in place of --overwrite to continue (or as it was, to"
            " start again)"
        )
    return "rerun the same command with --resume to continue (or --overwrite to start again)"


def incomplete(
    options: dict[str, Any], images_done: int, images_total: int, advice: str | None = None
) -> dict[str, Any]:
    """The manifest of an interrupted capture: it says so, how far it got, and how to go on."""
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": False,
        "hookdump_version": __version__,
        "cwd": os.getcwd(),
        "progress": {"images_done": images_done, "images_total": images_total},
        "resume": advice or resume_advice(False),
        "options": options,
        "tensors": [],
    }
