"""The Python API: ``list_modules`` and ``capture`` return dataclasses and never print."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import __version__, inputs, inventory, layers, models, sinks
from .errors import UsageError
from .inputs import InputSpec
from .inventory import Inventory, ModuleInfo
from .models import ModelSpec
from .recorder import Recorder
from .sinks import SavedTensor


@dataclass
class ModuleTree:
    """Every module of a model, as ``hookdump list-modules`` shows it, and the part of it a view selects."""

    requested: str
    timm_name: str
    inventory: Inventory
    notes: list[str] = field(default_factory=list)
    shown: list[str] | None = None  # what --depth / --filter / --leaves selected; None: every module
    depth: int | None = None
    flat: bool = False  # --filter / --leaves: the matches as a flat list of full paths, not a tree

    @property
    def modules(self) -> list[ModuleInfo]:
        """The selected modules (all of them when no view was asked for), in ``named_modules()`` order."""
        if self.shown is None:
            return self.inventory.modules
        keep = set(self.shown)
        return [info for info in self.inventory.modules if info.name in keep]


@dataclass
class CaptureResult:
    """What a capture wrote, and what the user should be told about it."""

    out: Path
    manifest: Path
    requested: str
    timm_name: str
    device: str
    tensors: list[SavedTensor]
    inputs: list[dict[str, Any]]
    notes: list[str]
    seconds: float


def list_modules(
    model: ModelSpec | str = models.DEFAULT_MODEL,
    *,
    input_size: tuple[int, int, int] | None = None,
    shapes: bool = True,
    depth: int | None = None,
    pattern: str | None = None,
    leaves: bool = False,
) -> ModuleTree:
    """Build the model once on the meta device and trace one pass: names, classes, calls, shapes.

    Args:
        model: a timm name, Twins alias or ``ModelSpec``.
        input_size: ``(C, H, W)`` for the traced pass; default: the model's own.
        shapes: False skips the traced pass (no calls, no shapes).
        depth: keep modules at most this many dotted segments deep.
        pattern: keep the modules this ``--layer``-style glob / ``re:`` regex matches; a plain path keeps
            that module and everything under it.
        leaves: keep only modules without children.
    """
    if depth is not None and depth < 1:
        raise UsageError(f"--depth {depth} is not positive.", "Use --depth 1 for the top-level modules.")
    spec = ModelSpec(model) if isinstance(model, str) else model
    name = models.resolve_name(spec)
    build_meta = _once(lambda: models.build(name.timm_name, meta=True))
    build_real = _once(lambda: models.build(name.timm_name))
    size = input_size or _default_input_size(build_meta, build_real)
    found = inventory.take(build_meta, build_real, size, shapes=shapes)
    shown = select(found, depth, pattern, leaves, name.requested)
    flat = pattern is not None or leaves
    return ModuleTree(name.requested, name.timm_name, found, name.notes + found.notes, shown, depth, flat)


def select(
    found: Inventory, depth: int | None, pattern: str | None, leaves: bool, model_label: str = "MODEL"
) -> list[str] | None:
    """Names a view keeps (None: no view asked for, keep all), in ``named_modules()`` order."""
    if depth is None and pattern is None and not leaves:
        return None
    names = found.names
    if pattern is not None:
        matched = layers.match(pattern, names)
        if matched is None:
            path = layers.normalize(pattern)
            if found.get(path) is None:
                raise layers.unknown_path(pattern, path, found, model_label)
            matched = [n for n in names if n == path or n.startswith(path + ".")]
        keep = set(matched)
        names = [n for n in names if n in keep]
    if depth is not None:
        names = [n for n in names if n.count(".") < depth]
    if leaves:
        names = [n for n in names if not found.get(n).children]  # type: ignore[union-attr]
    return names


def _once(build: Callable[[], torch.nn.Module]) -> Callable[[], torch.nn.Module]:
    """``build`` run at most once: later calls return the same model, or raise the same error."""
    memo: list[torch.nn.Module] = []
    failed: list[Exception] = []

    def wrapper() -> torch.nn.Module:
        if failed:
            raise failed[0]
        if not memo:
            try:
                memo.append(build())
            except Exception as exc:
                failed.append(exc)
                raise
        return memo[0]

    return wrapper


def _default_input_size(
    build_meta: Callable[[], torch.nn.Module], build_real: Callable[[], torch.nn.Module]
) -> tuple[int, int, int]:
    try:
        module = build_meta()
    except Exception:
        module = build_real()
    c, h, w = inputs.data_config(module, None)["input_size"]
    return c, h, w


def capture(
    images: InputSpec | list[str] | tuple[str, ...],
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: ModelSpec | str = models.DEFAULT_MODEL,
    out: Path | str = "hookdump-out",
    formats: str | tuple[str, ...] = ("npy",),
    what: str = "output",
    device: str = "auto",
    batch_size: int = 16,
    overwrite: bool = False,
) -> CaptureResult:
    """Hook ``layer_specs``, run the images through the model in eval mode, write the tensors to ``out``."""
    started = time.perf_counter()
    spec = ModelSpec(model) if isinstance(model, str) else model
    source = images if isinstance(images, InputSpec) else InputSpec(paths=tuple(images))
    out = Path(out)
    fmt = sinks.parse_formats(formats)
    _check_choice("--what", what, ("output", "input", "both"))
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size} is not positive.", "Use 1 or more.")
    sinks.check_out_dir(out, overwrite)
    paths = inputs.collect(source)
    name = models.resolve_name(spec)
    torch_device = models.resolve_device(device)
    net, notes = models.load(spec, name.timm_name, torch_device)
    config = inputs.data_config(net, source.input_size)
    found = inventory.take(lambda: models.build(name.timm_name, meta=True), lambda: net, config["input_size"])
    targets = layers.resolve(list(layer_specs), found, name.requested)
    was_training = net.training
    try:
        net.eval()
        with Recorder(net, targets, what) as recorder, torch.inference_mode():
            if source.random:
                recorder.run(inputs.random_batch(config, source.seed).to(torch_device), name.requested)
            for _, batch in inputs.batches(paths, config, batch_size):
                recorder.run(batch.to(torch_device), name.requested)
    finally:
        net.train(was_training)
    input_records = _input_records(paths, source, config)
    header = _manifest_header(spec, name, str(torch_device), config, input_records)
    saved = sinks.write(out, recorder.results(), fmt, header)
    return CaptureResult(
        out=out,
        manifest=out / sinks.MANIFEST,
        requested=name.requested,
        timm_name=name.timm_name,
        device=str(torch_device),
        tensors=saved,
        inputs=input_records,
        notes=name.notes + notes + found.notes,
        seconds=time.perf_counter() - started,
    )


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(
            f"{option} `{value}` is not one of {', '.join(choices)}.", f"Use {option} {choices[0]}."
        )


def _input_records(paths: list[Path], source: InputSpec, config: dict[str, Any]) -> list[dict[str, Any]]:
    if source.random:
        return [{"random": True, "seed": source.seed, "shape": [1, *config["input_size"]]}]
    return [
        {"path": str(p), "sha256": inputs.sha256(p), **({"sample": True} if source.sample else {})}
        for p in paths
    ]


def _manifest_header(
    spec: ModelSpec,
    name: models.ResolvedName,
    device: str,
    config: dict[str, Any],
    records: list[dict[str, Any]],
) -> dict[str, Any]:
    import timm

    return {
        "hookdump_version": __version__,
        "torch_version": torch.__version__,
        "timm_version": timm.__version__,
        "model": {
            "requested": name.requested,
            "timm_name": name.timm_name,
            "checkpoint": str(spec.checkpoint) if spec.checkpoint else None,
            "pretrained": spec.pretrained,
        },
        "device": device,
        "dtype": "float32",
        "transform": {
            "input_size": list(config["input_size"]),
            "mean": list(config["mean"]),
            "std": list(config["std"]),
            "interpolation": config["interpolation"],
            "crop_pct": config["crop_pct"],
        },
        "inputs": records,
    }
