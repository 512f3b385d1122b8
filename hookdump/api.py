"""The Python API: every command as a function that returns dataclasses and never prints."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from .analysis.diff import DiffResult, diff
from .analysis.similarity import Similarity, compare
from .analysis.top import TopResult, top
from .capture import budget, checks, header, parallel, reduce, run, scores
from .capture.options import CaptureOptions
from .capture.results import CapturePlan, CaptureResult, ModuleTree, from_manifest
from .errors import UsageError
from .inputs import files, loader, transforms
from .inputs.spec import InputSpec
from .model import attention, inventory, layers, layouts, opspecs, sources
from .model.device import resolve_device
from .model.sources import module as module_source
from .model.spec import DEFAULT_MODEL, ModelSpec
from .pictures.draw import capture_pictures
from .store.folder import commit, outdir, profile
from .store.folder.journal import SCRATCH, check_inputs_unchanged, check_same_run, read_progress
from .store.folder.reader import finished_manifest
from .store.formats import choices

T = TypeVar("T")
#: A model as the API takes it: a name (timm, a Twins alias, ``tv:NAME``), a ``ModelSpec``, or a module.
Model = ModelSpec | str | torch.nn.Module
#: A caller's eval transform: a PIL image to a ``(C, H, W)`` float tensor.
Transform = Callable[[Any], torch.Tensor]

__all__ = [
    "CaptureOptions",
    "CapturePlan",
    "CaptureResult",
    "DiffResult",
    "InputSpec",
    "ModelSpec",
    "ModuleTree",
    "Similarity",
    "TopResult",
    "capture",
    "compare",
    "diff",
    "list_modules",
    "plan",
    "top",
]


def list_modules(
    model: Model = DEFAULT_MODEL,
    *,
    input_size: tuple[int, int, int] | None = None,
    shapes: bool = True,
    depth: int | None = None,
    pattern: str | None = None,
    leaves: bool = False,
    transform: Transform | None = None,
    ops: bool = False,
) -> ModuleTree:
    """Build the model once on the meta device and trace one pass: names, classes, calls, shapes.

    Args:
        model: a timm name, Twins alias, ``tv:NAME`` (torchvision), ``ModelSpec``, or an ``nn.Module`` of
            yours: it is traced as a deep copy on the meta device (a real CPU pass on a deep copy where it
            cannot run on meta), never touched itself.
        input_size: ``(C, H, W)`` for the traced pass; default: the model's own (a module of yours: what
            ``transform`` makes of a grey image, or its timm ``pretrained_cfg``).
        shapes: False skips the traced pass (no calls, no shapes).
        depth: keep modules at most this many dotted segments deep.
        pattern: keep the modules this ``--layer``-style glob / ``re:`` regex matches; a plain path keeps
            that module and everything under it.
        leaves: keep only modules without children.
        transform: the eval transform of a module of yours (a PIL image to a ``(C, H, W)`` float tensor).
        ops: also name each module's own ops (``PATH:OP``, ``model/ops.py``) in the traced pass.
    """
    if depth is not None and depth < 1:
        raise UsageError(f"--depth {depth} is not positive.", "Use --depth 1 for the top-level modules.")
    spec = _model_spec(model, transform)
    source = sources.resolve(spec)
    name = source.name
    build_meta = _once(source.build_meta)
    build_real = _once(lambda: source.load()[0])
    size = input_size
    if size is None:
        config, _ = transforms.eval_config(
            source.preprocess, spec, build_meta, build_real, None, [], ("input size",)
        )
        size = config["input_size"]
    found = inventory.take(
        build_meta, build_real, size, shapes=shapes, size_given=input_size is not None, ops=ops and shapes
    )
    shown = layers.select(found, depth, pattern, leaves, name.requested)
    flat = pattern is not None or leaves
    ignored = ["--ops is ignored with --no-shapes: ops are found in the traced pass it skips"] * (
        ops and not shapes
    )
    notes = name.notes + found.notes + ignored
    return ModuleTree(name.requested, name.timm_name, found, notes, shown, depth, flat)


def _model_spec(model: Model, transform: Transform | None = None) -> ModelSpec:
    """The ``ModelSpec`` of what the API was given (``transform``: the eval transform, for any source)."""
    if isinstance(model, torch.nn.Module):
        return module_source.spec_for(model, transform)
    spec = ModelSpec(model) if isinstance(model, str) else model
    return spec if transform is None else dataclasses.replace(spec, transform=transform)


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


def plan(
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: Model = DEFAULT_MODEL,
    images: InputSpec | list[str] | tuple[str, ...] | None = None,
    input_size: tuple[int, int, int] | None = None,
    options: CaptureOptions | None = None,
    decode: bool = True,
    transform: Transform | None = None,
    **option_values: Any,
) -> CapturePlan:
    """The preflight ``capture`` runs before its first batch, and ``--dry-run`` is: check everything that
    needs no batch and fail where the run would: options, output folder, model name, device, weights
    (names and shapes), inputs, layers (traced on the meta device). The real model is not built, unless
    the model cannot run on meta or its weights are ``--pretrained`` ones (only getting them tells whether
    they can be had; the run reuses what was loaded).

    Args:
        model, transform: as for ``capture``.
        images: as for ``capture``; None checks only the model and the layers.
        input_size: ``(C, H, W)`` when ``images`` is None (else ``InputSpec.input_size``).
        options / option_values: a ``CaptureOptions``, or its fields as keywords (``out=..., batch_size=8``).
        decode: decode every input as the run would (a truncated file is refused here too); ``capture``,
            which decodes them anyway, turns it off.
    """
    opts = dataclasses.replace(options or CaptureOptions(), **option_values)
    opts = dataclasses.replace(opts, out=Path(opts.out), formats=choices.parse_formats(opts.formats))
    checks.check_options(opts)
    on_ranks = parallel.world()[1] > 1 and opts.shard is None  # torchrun: each rank plans its shard again
    spec = _model_spec(model, transform)
    source = images if isinstance(images, InputSpec) or images is None else InputSpec(paths=tuple(images))
    size = source.input_size if source is not None else input_size
    origin = sources.resolve(spec)
    name = origin.name
    resolve_device(opts.device)
    unfused: list[int] = []  # --attention: how many modules ran fused attention

    def prepared(model: torch.nn.Module) -> torch.nn.Module:
        if opts.attention:
            unfused.append(attention.unfuse(model))
        return model

    build_meta = _once(lambda: prepared(origin.build_meta()))
    load_real = _once(lambda: _with_model(origin.load(), prepared))
    meta_model = _or_none(build_meta)
    origin.check_weights(meta_model)
    skipped: list[dict[str, str]] = []
    where: list[int] = []  # how many images come before each skipped file
    walk_notes: list[str] = []
    progress = read_progress(opts.out) if opts.resume and source is not None else None
    journal: list[dict[str, Any]] = []  # the records of the inputs already captured, each hashed again
    if progress is not None:  # (under torchrun each rank checks its own shard's)
        with profile.span("resume check", forks=True):
            journal = check_inputs_unchanged(opts.out, progress)
    unchanged = frozenset(record["path"] for record in journal)  # (their headers are good)
    paths = (
        files.collect(source, (opts.out,), skipped if opts.skip_bad else None, where, walk_notes, unchanged)
        if source
        else []
    )
    walk_notes += files.option_notes(paths, source) if source is not None else []
    pixels = ("mean", "std") if source is not None and not source.random else ()
    must_say = (() if size is not None else ("input size",)) + pixels  # what a module of yours must say
    config, transform_notes = transforms.eval_config(
        origin.preprocess, spec, build_meta, lambda: load_real()[0], size, paths, must_say
    )
    if source is not None and source.image_part:  # the decoding workers read a sample's image by it
        config["image_key"] = source.image_part
    if source is not None and source.label_column:  # ... and a table row's label
        config["label_column"] = source.label_column
    wants_ops = any(opspecs.is_op_spec(s) for s in layer_specs)  # the ops are named in the traced pass
    found = inventory.take(
        build_meta, lambda: load_real()[0], config["input_size"], size_given=size is not None, ops=wants_ops
    )
    resolved: list[str] = []  # what each feat:K became
    targets = layers.resolve(list(layer_specs), found, name.requested, resolved)
    op_values = [t.path for t in targets if found.op(t.path) is not None]
    op_notes = checks.check_op_values([t.path for t in targets], op_values, opts)
    opspecs.check_batch_first(op_values, found, name.requested)
    op_notes += opspecs.fast_path_notes(op_values, found)
    if opts.grad:  # the run's own check of the scores, on the traced output: --dry-run says the same
        scores.check(found.returns, opts.target, name.requested, found.returns_plain)
    outdir.check_file_names([t.path for t in targets], opts.formats)
    outdir.in_the_way(opts.out, [t.path for t in targets], opts.formats, commit.owned(opts.out), opts.png)
    tree = ModuleTree(name.requested, name.timm_name, found, name.notes + found.notes)
    typed = meta_model if meta_model is not None else load_real()[0]  # module types are all it needs
    channels_last = layouts.channels_last_paths(typed, [t.path for t in targets])
    owners = [op.module for name in op_values if (op := found.op(name)) is not None]
    channels_last |= opspecs.channels_last(op_values, found, layouts.channels_last_paths(typed, owners))
    prefix_tokens = getattr(typed, "num_prefix_tokens", None)
    class_token = getattr(typed, "cls_token", None) is not None  # timm's ViT family: None without one
    shapes = {t.path: found.get(t.path).output_shapes for t in targets}  # type: ignore[union-attr]
    notes = transform_notes + walk_notes + resolved + op_notes
    notes += reduce.check(opts.reduce, shapes, class_token, name.requested, reduce.token_layout(typed))
    layouts.check_reduce(opts.reduce, shapes)
    save_as: dict[str, tuple[str, str]] = {}
    if opts.attention:
        drops = attention.targets(targets, found, name.requested)
        targets += [layers.LayerTarget(drop) for drop in drops]
        save_as = {drop: (owner, "attn") for drop, owner in drops.items()}
        notes += attention.notes(drops, found)
        notes.append(origin.attention(typed, max(unfused, default=0), drops))
    if opts.target is not None and not opts.grad:
        notes.append(f"--target {opts.target} is ignored without --grad (no gradient is computed)")
    record = {}
    if source is not None:
        record = header.options_record(source, list(layer_specs), spec, opts, origin.rerun)
    shard = None
    if opts.shard is not None and source is not None:
        total = len(paths)
        paths, shard = parallel.shard_of(paths, source, opts, record)
        first, last = shard["first_row"], shard["first_row"] + shard["rows"]  # its own skipped files only
        skipped = [s for s, k in zip(skipped, where, strict=True) if first <= k < last or k == last == total]
    if progress is not None:  # the inputs it captures (a shard's)
        check_same_run(progress, record, [str(p) for p in paths])
    elif opts.resume and source is not None and outdir.nothing_written(opts.out):
        notes.append(outdir.starts_again(opts.out))  # killed before its first batch: the writer starts over
    if decode and source is not None:  # what the run decodes (this shard's): refused where it would be
        if config.get("callable") is not None:  # a caller's transform, run as the run runs it: its sizes
            notes += loader.planned_sizes(paths, config, opts.batch_size, opts.skip_bad)
        paths = files.decode_all(paths, config, skipped if opts.skip_bad else None)
        if skipped:
            why = f": {skipped[0]['reason']}" if len(skipped) == 1 else ""
            notes.append(files.skipped_note(skipped, "would leave out", said_in_manifest=False) + why)
    rows = len(paths) if source is not None and not source.random else 1
    sizes = budget.per_layer(found, targets, opts, rows, channels_last)
    needed = budget.total(sizes, opts)
    notes += filter(None, [budget.shard_size_note(sizes, opts)])
    budget.check_fits(needed, opts.out, already=_bytes_in(opts.out / SCRATCH) if opts.resume else 0)
    if spec.pretrained and not (progress or {}).get("committing") and not on_ranks:
        load_real()  # weights from a hub or a download: only getting them tells whether they can be had
    return CapturePlan(
        tree, targets, spec, opts, source, paths, config, notes, load_real, sizes, needed, skipped, progress,
        shard, save_as, channels_last, prefix_tokens, class_token, origin.record, origin.rerun, journal,
    )  # fmt: skip


def _with_model(
    loaded: tuple[torch.nn.Module, list[str]], prepare: Callable[[torch.nn.Module], torch.nn.Module]
) -> tuple[torch.nn.Module, list[str]]:
    return prepare(loaded[0]), loaded[1]


def _bytes_in(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file())


def capture(
    images: InputSpec | list[str] | tuple[str, ...],
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: Model = DEFAULT_MODEL,
    options: CaptureOptions | None = None,
    on_batch: Callable[[int, int, int], None] | None = None,
    transform: Transform | None = None,
    **option_values: Any,
) -> CaptureResult:
    """Hook ``layer_specs``, run the images through the model in eval mode, write the tensors to ``out``.

    Args:
        images: paths (files, folders, globs, ``@list.txt``) or an ``InputSpec``.
        layer_specs: paths, ``[i]`` indexing, globs, ``re:`` regexes, ``LAYER@k`` for one call.
        model: a timm name, Twins alias, ``tv:NAME`` (torchvision), ``ModelSpec`` (weights, plugins, seed of
            random weights), or an ``nn.Module`` of yours. A module is never run itself: the capture runs a
            deep copy of it in eval mode (as much memory again as its weights, on its device), so its
            weights, modes, hooks, device and ``requires_grad`` stay as they were, whatever happens; the
            manifest records its class and the sha256 of its state dict.
        transform: the eval transform (a PIL image to a ``(C, H, W)`` float tensor); without it, a module
            of yours needs a timm ``pretrained_cfg`` (input size, mean, std).
        options / option_values: a ``CaptureOptions``, or its fields as keywords (``out=..., grad=True``).
        on_batch: called after each batch reached the disk with (images done, images in all, bytes written).
    """
    started = time.perf_counter()
    profile.reset()  # (a capture before this one in the process)
    if parallel.world()[1] > 1:
        parallel.check_no_shard(option_values.get("shard", options.shard if options else None))
    commit.clean_finished(Path(dataclasses.replace(options or CaptureOptions(), **option_values).out))
    found = plan(
        layer_specs, model=model, images=images, options=options, decode=False, transform=transform,
        **option_values,
    )  # fmt: skip
    if parallel.world()[1] > 1:
        result = _capture_on_ranks(found, list(layer_specs), started)
    else:
        result = run.run(found, list(layer_specs), started, on_batch)
    if found.options.png and parallel.world()[0] == 0:
        shown = capture_pictures(result.out, result.inputs)
        result.pictures, result.notes = [r.path for r in shown.rendered], result.notes + shown.notes
    return result


def _capture_on_ranks(found: CapturePlan, layer_specs: list[str], started: float) -> CaptureResult:
    """Under torchrun: every rank captures its shard, rank 0 merges them into ``out`` (``parallel``)."""
    opts = found.options
    assert found.source is not None

    def run_shard(shard: str, folder: Path, device: str, resume: bool) -> None:
        rank_opts = dataclasses.replace(
            opts, shard=shard, out=folder, device=device, overwrite=not resume, resume=resume
        )
        rank_plan = plan(layer_specs, model=found.spec, images=found.source, options=rank_opts, decode=False)
        run.run(rank_plan, layer_specs, time.perf_counter(), None)

    shards = min(parallel.world()[1], -(-len(found.paths) // opts.batch_size))  # a rank without a batch idles
    merged = parallel.capture_on_ranks(run_shard, opts, max(shards, 1))
    data = finished_manifest(opts.out)
    return from_manifest(opts.out, data, time.perf_counter() - started, merged.tensors if merged else None)
