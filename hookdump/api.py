"""The Python API: ``list_modules`` and ``capture`` return dataclasses and never print."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import inputs, inventory, layers, manifest, models, sinks
from .errors import UsageError, check_choice
from .inputs import InputSpec
from .inventory import Inventory, ModuleInfo
from .lock import check_free
from .models import ModelSpec
from .options import CaptureOptions
from .recorder import Recorder
from .records import Captured
from .runner import DTYPES, Run, forward_all
from .sinks import SavedTensor

__all__ = [
    "CaptureOptions",
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


def _once_pair(
    build: Callable[[], tuple[torch.nn.Module, list[str]]],
) -> Callable[[], tuple[torch.nn.Module, list[str]]]:
    """``_once`` for a builder that also returns notes."""
    memo: list[tuple[torch.nn.Module, list[str]]] = []

    def wrapper() -> tuple[torch.nn.Module, list[str]]:
        if not memo:
            memo.append(build())
        return memo[0]

    return wrapper


def _or_none(build: Callable[[], torch.nn.Module]) -> torch.nn.Module | None:
    try:
        return build()
    except Exception:
        return None


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
    """Everything a capture checks before its first forward, without the real model (``--dry-run``)."""

    tree: ModuleTree
    targets: list[layers.LayerTarget]
    spec: ModelSpec
    options: CaptureOptions
    source: InputSpec | None = None
    paths: list[Path] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    load: Callable[[], tuple[torch.nn.Module, list[str]]] | None = None  # the real model, built once

    @property
    def modules(self) -> list[ModuleInfo]:
        found = [self.tree.inventory.get(t.path) for t in self.targets]
        return [m for m in found if m is not None]


def plan(
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: ModelSpec | str = models.DEFAULT_MODEL,
    images: InputSpec | list[str] | tuple[str, ...] | None = None,
    input_size: tuple[int, int, int] | None = None,
    options: CaptureOptions | None = None,
    **option_values: Any,
) -> CapturePlan:
    """Check everything a capture would before its first forward pass, in the same order, and fail where
    it would: options, output folder, model name, device, weights (names and shapes), inputs, layers
    (traced on the meta device). The real model is not built (unless the model cannot run on meta).

    Args:
        images: as for ``capture``; None checks only the model and the layers.
        input_size: ``(C, H, W)`` when ``images`` is None (else ``InputSpec.input_size``).
        options / option_values: a ``CaptureOptions``, or its fields as keywords (``out=..., batch_size=8``).
    """
    opts = dataclasses.replace(options or CaptureOptions(), **option_values)
    opts = dataclasses.replace(opts, out=Path(opts.out), formats=sinks.parse_formats(opts.formats))
    _check_options(opts)
    spec = ModelSpec(model) if isinstance(model, str) else model
    source = images if isinstance(images, InputSpec) or images is None else InputSpec(paths=tuple(images))
    size = source.input_size if source is not None else input_size
    name = models.resolve_name(spec)
    models.resolve_device(opts.device)
    build_meta = _once(lambda: models.build(name.timm_name, meta=True))
    load_real = _once_pair(lambda: models.load(spec, name.timm_name))
    meta_model = _or_none(build_meta)
    models.check_weights(spec, meta_model, name.timm_name)
    paths = inputs.collect(source, exclude=(opts.out,)) if source is not None else []
    config = inputs.data_config(meta_model if meta_model is not None else load_real()[0], size)
    found = inventory.take(
        build_meta, lambda: load_real()[0], config["input_size"], size_given=size is not None
    )
    targets = layers.resolve(list(layer_specs), found, name.requested)
    tree = ModuleTree(name.requested, name.timm_name, found, name.notes + found.notes)
    notes = []
    if opts.target is not None and not opts.grad:
        notes.append(f"--target {opts.target} is ignored without --grad (no gradient is computed)")
    return CapturePlan(tree, targets, spec, opts, source, paths, config, notes, load_real)


def capture(
    images: InputSpec | list[str] | tuple[str, ...],
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: ModelSpec | str = models.DEFAULT_MODEL,
    options: CaptureOptions | None = None,
    **option_values: Any,
) -> CaptureResult:
    """Hook ``layer_specs``, run the images through the model in eval mode, write the tensors to ``out``.

    Args:
        images: paths (files, folders, globs, ``@list.txt``) or an ``InputSpec``.
        layer_specs: paths, ``[i]`` indexing, globs, ``re:`` regexes, ``LAYER@k`` for one call.
        model: a timm name, Twins alias or ``ModelSpec`` (weights, plugins, seed of random weights).
        options / option_values: a ``CaptureOptions``, or its fields as keywords (``out=..., grad=True``).
    """
    started = time.perf_counter()
    found = plan(layer_specs, model=model, images=images, options=options, **option_values)
    opts, spec, source = found.options, found.spec, found.source
    assert source is not None and found.load is not None
    name = models.ResolvedName(found.tree.requested, found.tree.timm_name)
    torch_device = models.resolve_device(opts.device)
    with sinks.Writer(opts.out, opts.formats, opts.save_dtype, opts.overwrite) as writer:
        net, weight_notes = found.load()
        net.to(torch_device)
        calls = {m.name: m.calls or 1 for m in found.tree.inventory.modules}
        finished = {m.name: m.finished for m in found.tree.inventory.modules if m.finished is not None}
        recorder = Recorder(
            net, found.targets, opts.what, grad=opts.grad,
            expected_calls=calls if opts.early_stop else None, finished=finished,
        )  # fmt: skip
        if source.random:
            batches: Iterable[torch.Tensor] = [inputs.random_batch(found.config, source.seed)]
        else:
            batches = (batch for _, batch in inputs.batches(found.paths, found.config, opts.batch_size))
        run = Run(torch_device, opts.dtype, opts.channels_last, opts.grad, opts.target)
        classes = forward_all(net, recorder, batches, run, name.requested, writer.append)
        results = recorder.entries()
        notes = (
            found.tree.notes + weight_notes + found.notes + writer.notes + _capture_notes(recorder, results)
        )
        records = inputs.records(found.paths, source, found.config)
        options_record = manifest.options_record(source, list(layer_specs), spec, opts)
        extra = {**_run_record(recorder, run, opts.save_dtype, classes), "notes": notes}
        header = manifest.header(spec, name, str(torch_device), found.config, records, options_record, extra)
        saved = writer.commit(results, header)
    return CaptureResult(
        out=opts.out,
        manifest=opts.out / manifest.MANIFEST,
        requested=name.requested,
        timm_name=name.timm_name,
        device=str(torch_device),
        tensors=saved,
        inputs=records,
        notes=notes,
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


def _check_options(opts: CaptureOptions) -> None:
    """Every option on its own and against the others, and the output folder, before any work."""
    check_choice("--what", opts.what, ("output", "input", "both"))
    check_choice("--dtype", opts.dtype, tuple(DTYPES))
    sinks.check_save_dtype(
        opts.save_dtype, opts.formats, {torch.bfloat16} if opts.dtype == "bfloat16" else set()
    )
    if opts.batch_size < 1:
        raise UsageError(f"--batch-size {opts.batch_size} is not positive.", "Use 1 or more.")
    if opts.target is not None and opts.target < 0:
        raise UsageError(f"--target {opts.target} is negative.", "Give a class index, 0 or more.")
    sinks.check_out_dir(opts.out, opts.overwrite)
    check_free(opts.out)
