"""The Python API: ``list_modules`` and ``capture`` return dataclasses and never print."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import inputs, inventory, layers, models, sinks
from .errors import UsageError, check_choice
from .inputs import InputSpec
from .inventory import Inventory, ModuleInfo
from .models import ModelSpec
from .recorder import Captured, Recorder
from .runner import DTYPES, Run, forward_all
from .sinks import SavedTensor

__all__ = [
    "CapturePlan",
    "CaptureResult",
    "InputSpec",
    "ModelSpec",
    "ModuleTree",
    "capture",
    "list_modules",
    "plan",
]


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
    stopped_early: bool = False
    classes: list[int] = field(default_factory=list)


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
    found = inventory.take(build_meta, build_real, size, shapes=shapes, size_given=input_size is not None)
    shown = layers.select(found, depth, pattern, leaves, name.requested)
    flat = pattern is not None or leaves
    return ModuleTree(name.requested, name.timm_name, found, name.notes + found.notes, shown, depth, flat)


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


@dataclass
class CapturePlan:
    """What a capture would hook, without running it (``--dry-run``)."""

    tree: ModuleTree
    targets: list[layers.LayerTarget]

    @property
    def modules(self) -> list[ModuleInfo]:
        found = [self.tree.inventory.get(t.path) for t in self.targets]
        return [m for m in found if m is not None]


def plan(
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: ModelSpec | str = models.DEFAULT_MODEL,
    input_size: tuple[int, int, int] | None = None,
) -> CapturePlan:
    """Resolve layer specs against the traced inventory (meta device): what would be hooked."""
    tree = list_modules(model, input_size=input_size)
    return CapturePlan(tree, layers.resolve(list(layer_specs), tree.inventory, tree.requested))


def capture(
    images: InputSpec | list[str] | tuple[str, ...],
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: ModelSpec | str = models.DEFAULT_MODEL,
    out: Path | str = "hookdump-out",
    formats: str | tuple[str, ...] = ("npy",),
    what: str = "output",
    grad: bool = False,
    target: int | None = None,
    device: str = "auto",
    dtype: str = "float32",
    channels_last: bool = False,
    save_dtype: str = "float32",
    batch_size: int = 16,
    early_stop: bool = True,
    overwrite: bool = False,
) -> CaptureResult:
    """Hook ``layer_specs``, run the images through the model in eval mode, write the tensors to ``out``.

    Args:
        images: paths (files, folders, globs, ``@list.txt``) or an ``InputSpec``.
        layer_specs: paths, ``[i]`` indexing, globs, ``re:`` regexes, ``LAYER@k`` for one call.
        what: ``output``, ``input`` or ``both``.
        grad: also save the gradient of each captured output, for class ``target`` (default: top class).
        dtype: compute precision (autocast); ``save_dtype="keep"`` saves tensors in it instead of float32.
        early_stop: stop the forward pass once every wanted layer has run (never with ``grad``).
    """
    started = time.perf_counter()
    spec = ModelSpec(model) if isinstance(model, str) else model
    source = images if isinstance(images, InputSpec) else InputSpec(paths=tuple(images))
    out = Path(out)
    fmt = sinks.parse_formats(formats)
    _check_options(what, dtype, save_dtype, fmt, batch_size, target)
    sinks.check_out_dir(out, overwrite)
    paths = inputs.collect(source)
    name = models.resolve_name(spec)
    torch_device = models.resolve_device(device)
    net, notes = models.load(spec, name.timm_name, torch_device)
    config = inputs.data_config(net, source.input_size)
    found = inventory.take(
        lambda: models.build(name.timm_name, meta=True),
        lambda: net,
        config["input_size"],
        size_given=source.input_size is not None,
    )
    targets = layers.resolve(list(layer_specs), found, name.requested)
    calls = {m.name: m.calls or 1 for m in found.modules}
    recorder = Recorder(net, targets, what, grad=grad, expected_calls=calls if early_stop else None)
    if source.random:
        batches: Iterable[torch.Tensor] = [inputs.random_batch(config, source.seed)]
    else:
        batches = (batch for _, batch in inputs.batches(paths, config, batch_size))
    run = Run(torch_device, dtype, channels_last, grad, target)
    with sinks.Writer(out, fmt, save_dtype) as writer:
        classes = forward_all(net, recorder, batches, run, name.requested, writer.append)
        records = inputs.records(paths, source, config)
        extra = _run_record(recorder, run, save_dtype, classes)
        header = sinks.manifest_header(spec, name, str(torch_device), dtype, config, records, extra)
        results = recorder.entries()
        saved = writer.commit(results, header)
    return CaptureResult(
        out=out,
        manifest=out / sinks.MANIFEST,
        requested=name.requested,
        timm_name=name.timm_name,
        device=str(torch_device),
        tensors=saved,
        inputs=records,
        notes=name.notes + notes + found.notes + _capture_notes(recorder, results),
        seconds=time.perf_counter() - started,
        stopped_early=recorder.stopped_early,
        classes=classes,
    )


def _run_record(recorder: Recorder, run: Run, save_dtype: str, classes: list[int]) -> dict[str, Any]:
    """The manifest keys that describe how this capture ran."""
    return {
        "save_dtype": save_dtype,
        "channels_last": run.channels_last,
        "stopped_early": recorder.stopped_early,
        "grad": {"target": "top" if run.target is None else run.target, "classes": classes}
        if run.grad
        else None,
        "values": [
            {"layer": k[0], "kind": k[1], "index": k[2], "call": k[3], "value": v}
            for k, v in recorder.other.items()
        ],
    }


def _capture_notes(recorder: Recorder, results: list[Captured]) -> list[str]:
    notes = [
        f"{path} runs {n} times per forward: one file per call ({path}@0 ... {path}@{n - 1});"
        f" --layer {path}@1 picks one"
        for path, n in recorder.calls_per_forward.items()
        if n > 1 and recorder.selected[path] is None
    ]
    notes += [
        f"{c.stem} ({c.kind}) was changed in place later in the forward pass; hookdump saved it as it was"
        " at hook time (a hook that keeps a reference would have saved the changed values)"
        for c in results
        if c.modified_in_place
    ]
    if recorder.grad:
        with_grad = {(c.layer, c.index, c.call) for c in results if c.kind == "grad"}
        notes += [
            f"no gradient reached {c.stem}: it does not affect the target score"
            for c in results
            if c.kind == "output" and (c.layer, c.index, c.call) not in with_grad
        ]
    if recorder.stopped_early:
        notes.append("stopped the forward pass once every wanted layer had run (--no-early-stop runs it all)")
    return notes


def _check_options(
    what: str, dtype: str, save_dtype: str, formats: tuple[str, ...], batch_size: int, target: int | None
) -> None:
    check_choice("--what", what, ("output", "input", "both"))
    check_choice("--dtype", dtype, tuple(DTYPES))
    sinks.check_save_dtype(save_dtype, formats, {torch.bfloat16} if dtype == "bfloat16" else set())
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size} is not positive.", "Use 1 or more.")
    if target is not None and target < 0:
        raise UsageError(f"--target {target} is negative.", "Give a class index, 0 or more.")
