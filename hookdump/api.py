"""The Python API: ``list_modules`` and ``capture`` return dataclasses and never print."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from . import budget, inputs, inventory, layers, loader, manifest, models, outdir, reduce, sinks, units
from .errors import Interrupted, UsageError, check_choice
from .inputs import InputSpec
from .inventory import Inventory, ModuleInfo
from .lock import check_free
from .models import ModelSpec
from .options import CaptureOptions
from .recorder import Recorder
from .records import Captured, Key
from .runner import DTYPES, Run, forward_all
from .sinks import SavedTensor

T = TypeVar("T")

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
    skipped: list[dict[str, str]] = field(default_factory=list)


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


def _once(build: Callable[[], T]) -> Callable[[], T]:
    """``build`` run at most once: later calls return the same result, or raise the same error."""
    memo: list[T] = []
    failed: list[Exception] = []

    def wrapper() -> T:
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
    sizes: dict[str, int] = field(default_factory=dict)  # bytes per layer, in one format
    total_bytes: int = 0  # peak disk use, every format
    skipped: list[dict[str, str]] = field(default_factory=list)  # --skip-bad: unreadable inputs
    progress: dict[str, Any] | None = None  # --resume: how far the interrupted run got

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
    load_real = _once(lambda: models.load(spec, name.timm_name))
    meta_model = _or_none(build_meta)
    models.check_weights(spec, meta_model, name.timm_name)
    skipped: list[dict[str, str]] = []
    paths = (
        inputs.collect(source, exclude=(opts.out,), skipped=skipped if opts.skip_bad else None)
        if source
        else []
    )
    config = inputs.data_config(meta_model if meta_model is not None else load_real()[0], size)
    found = inventory.take(
        build_meta, lambda: load_real()[0], config["input_size"], size_given=size is not None
    )
    targets = layers.resolve(list(layer_specs), found, name.requested)
    tree = ModuleTree(name.requested, name.timm_name, found, name.notes + found.notes)
    notes = reduce.check(opts.reduce, {t.path: found.get(t.path).output_shapes for t in targets})  # type: ignore[union-attr]
    if opts.target is not None and not opts.grad:
        notes.append(f"--target {opts.target} is ignored without --grad (no gradient is computed)")
    progress = None
    if opts.resume and source is not None:
        progress = outdir.read_progress(opts.out)
        assert progress is not None, "outdir.check makes sure"
        record = manifest.options_record(source, list(layer_specs), spec, opts)
        outdir.check_same_run(progress, record, [str(p) for p in paths])
    rows = len(paths) if source is not None and not source.random else 1
    sizes = budget.per_layer(found, targets, opts, rows)
    needed = budget.total(sizes, opts)
    budget.check_fits(needed, opts.out, already=_bytes_in(opts.out / outdir.SCRATCH) if opts.resume else 0)
    return CapturePlan(
        tree, targets, spec, opts, source, paths, config, notes, load_real, sizes, needed, skipped, progress
    )


def _bytes_in(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file())


def capture(
    images: InputSpec | list[str] | tuple[str, ...],
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: ModelSpec | str = models.DEFAULT_MODEL,
    options: CaptureOptions | None = None,
    on_batch: Callable[[int, int, int], None] | None = None,
    **option_values: Any,
) -> CaptureResult:
    """Hook ``layer_specs``, run the images through the model in eval mode, write the tensors to ``out``.

    Args:
        images: paths (files, folders, globs, ``@list.txt``) or an ``InputSpec``.
        layer_specs: paths, ``[i]`` indexing, globs, ``re:`` regexes, ``LAYER@k`` for one call.
        model: a timm name, Twins alias or ``ModelSpec`` (weights, plugins, seed of random weights).
        options / option_values: a ``CaptureOptions``, or its fields as keywords (``out=..., grad=True``).
        on_batch: called after each batch reached the disk with (images done, images in all, bytes written).
    """
    started = time.perf_counter()
    found = plan(layer_specs, model=model, images=images, options=options, **option_values)
    opts, spec, source = found.options, found.spec, found.source
    assert source is not None and found.load is not None
    name = models.ResolvedName(found.tree.requested, found.tree.timm_name)
    torch_device = models.resolve_device(opts.device)
    shard_bytes = units.parse_size(opts.shard_size) if opts.shard_size else None
    options_record = manifest.options_record(source, list(layer_specs), spec, opts)
    input_list = [str(p) for p in found.paths]
    with sinks.Writer(
        opts.out, opts.formats, opts.save_dtype, opts.overwrite, opts.resume, shard_bytes
    ) as writer:
        net, weight_notes = found.load()
        net.to(torch_device)
        recorder = _recorder(net, found)
        state = _RunState(writer.resumed, found.skipped)
        if writer.resumed is not None:
            recorder.restore(writer.resumed["recorder"])
        run = Run(torch_device, opts.dtype, opts.channels_last, opts.grad, opts.target)

        def sink(tensors: dict[Key, torch.Tensor], batch: loader.Batch, classes: list[int]) -> None:
            writer.append(tensors)
            state.advance(batch, classes)
            writer.checkpoint(state.progress(options_record, input_list, recorder))
            if on_batch is not None:
                on_batch(state.images, len(found.paths) or 1, writer.bytes_written())

        batches = _batches(found, state.batches)
        try:
            forward_all(net, recorder, batches, run, name.requested, sink)
        except KeyboardInterrupt as exc:
            code = exc.exit_code if isinstance(exc, Interrupted) else 130
            writer.suspend(manifest.incomplete(options_record, state.images, len(found.paths) or 1))
            raise Interrupted(
                code, _interrupted_text(opts.out, state.images, len(found.paths) or 1, writer)
            ) from None
        results = recorder.entries()
        notes = (
            found.tree.notes + weight_notes + found.notes + writer.notes + _capture_notes(recorder, results)
        )
        if writer.resumed is not None:
            notes.append(f"resumed after {writer.resumed['images']} of {len(found.paths)} images")
        if state.skipped:
            shown = ", ".join(s["path"] for s in state.skipped[:3]) + (
                ", ..." if len(state.skipped) > 3 else ""
            )
            notes.append(
                f"--skip-bad left out {len(state.skipped)} unreadable input(s) ({shown}); the manifest's"
                " `skipped` says why"
            )
        records = inputs.records(
            [p for p in found.paths if str(p) not in state.skipped_paths], source, found.config
        )
        extra = {**_run_record(recorder, run, opts, state.classes), "skipped": state.skipped, "notes": notes}
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
        classes=state.classes,
        skipped=state.skipped,
    )


class _RunState:
    """How far the run got: batches, images, classes, skipped inputs; continued from ``progress``."""

    def __init__(self, progress: dict[str, Any] | None, skipped: list[dict[str, str]]) -> None:
        progress = progress or {}
        self.batches: int = progress.get("batches", 0)
        self.images: int = progress.get("images", 0)
        self.classes: list[int] = progress.get("classes", [])
        self.skipped: list[dict[str, str]] = progress.get("skipped", skipped)

    @property
    def skipped_paths(self) -> set[str]:
        return {s["path"] for s in self.skipped}

    def advance(self, batch: loader.Batch, classes: list[int]) -> None:
        self.batches += 1
        self.images += len(batch.paths) + len(batch.failed)
        self.classes += classes
        self.skipped += batch.failed

    def progress(self, options: dict[str, Any], paths: list[str], recorder: Recorder) -> dict[str, Any]:
        return {
            "options": options, "inputs": paths, "batches": self.batches, "images": self.images,
            "total": len(paths) or 1, "classes": self.classes, "skipped": self.skipped,
            "recorder": recorder.state(),
        }  # fmt: skip


def _recorder(net: torch.nn.Module, found: CapturePlan) -> Recorder:
    opts, modules = found.options, found.tree.inventory.modules
    calls = {m.name: m.calls or 1 for m in modules}
    finished = {m.name: m.finished for m in modules if m.finished is not None}
    return Recorder(
        net, found.targets, opts.what, grad=opts.grad, expected_calls=calls if opts.early_stop else None,
        finished=finished, reduce=opts.reduce,
    )  # fmt: skip


def _batches(found: CapturePlan, done: int) -> Iterable[loader.Batch]:
    """The batches still to run (after ``done`` of them, with --resume)."""
    opts, source = found.options, found.source
    assert source is not None
    if source.random:
        return [] if done else [loader.Batch([], inputs.random_batch(found.config, source.seed))]
    rest = found.paths[done * opts.batch_size :]
    workers = loader.default_workers(len(rest), opts.batch_size) if opts.workers is None else opts.workers
    pin = models.resolve_device(opts.device).type == "cuda"
    return loader.batches(rest, found.config, opts.batch_size, workers, opts.skip_bad, pin)


def _interrupted_text(out: Path, done: int, total: int, writer: sinks.Writer) -> str:
    if not writer.kept:
        return "nothing of this run was kept."
    return (
        f"{done} of {total} images reached `{out}`. Rerun the same command with --resume to continue"
        " (or --overwrite to start again)."
    )


def _run_record(recorder: Recorder, run: Run, opts: CaptureOptions, classes: list[int]) -> dict[str, Any]:
    """The manifest keys that describe how this capture ran."""
    return {
        "save_dtype": opts.save_dtype,
        "channels_last": run.channels_last,
        "reduce": opts.reduce,
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
    check_choice("--reduce", opts.reduce, reduce.REDUCTIONS)
    sinks.check_save_dtype(
        opts.save_dtype, opts.formats, {torch.bfloat16} if opts.dtype == "bfloat16" else set()
    )
    if opts.batch_size < 1:
        raise UsageError(f"--batch-size {opts.batch_size} is not positive.", "Use 1 or more.")
    if opts.workers is not None and opts.workers < 0:
        raise UsageError(f"--workers {opts.workers} is negative.", "Use 0 (decode in process) or more.")
    if opts.target is not None and opts.target < 0:
        raise UsageError(f"--target {opts.target} is negative.", "Give a class index, 0 or more.")
    if opts.shard_size is not None:
        units.parse_size(opts.shard_size)
    check_free(opts.out)  # a folder another run is writing says so, whatever it holds
    outdir.check(opts.out, opts.overwrite, opts.resume)
