"""The preflight that ``capture`` runs before its first batch and that ``--dry-run`` is: every check that
needs no batch (options, output folder, model, device, weights, inputs, layers traced on the meta device,
sizes), failing where the run would, and the ``CapturePlan`` the run follows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import UsageError
from ..inputs import fetch, files, loader, transforms
from ..inputs.fetch import shown
from ..inputs.spec import InputSpec
from ..model import attention, inventory, layers, layouts, opspecs, sources
from ..model.device import resolve_device
from ..store.folder import commit, outdir, profile, remote
from ..store.folder.journal import SCRATCH, check_inputs_unchanged, check_same_run, read_progress
from ..store.formats import choices
from . import budget, checks, header, parallel, reduce, scores
from .build import Model, Transform, model_spec, once
from .options import CaptureOptions
from .results import CapturePlan, ModuleTree


def plan(
    layer_specs: list[str] | tuple[str, ...],
    model: Model,
    images: InputSpec | list[str] | tuple[str, ...] | None,
    opts: CaptureOptions,
    *,
    input_size: tuple[int, int, int] | None = None,
    decode: bool = True,
    transform: Transform | None = None,
) -> CapturePlan:
    """``api.plan`` (its docstring says what it checks) with the options made: ``opts``."""
    published = opts.url
    if published is not None:  # written to a local mirror first (``opts.folder``), published when whole
        if opts.png:
            raise UsageError(
                f"--png draws beside the tensors, in a local folder, not in `{published}`.",
                f"Capture without --png, then draw with hookdump show {published} -o FOLDER.",
            )
        remote.check(published, opts.overwrite, opts.resume, lease=parallel.world()[0] == 0)
    out = opts.out if published is not None else opts.folder
    opts = dataclasses.replace(opts, out=out, formats=choices.parse_formats(opts.formats))
    checks.check_options(opts)
    on_ranks = parallel.world()[1] > 1 and opts.shard is None  # torchrun: each rank plans its shard again
    spec = model_spec(model, transform)
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

    build_meta = once(lambda: prepared(origin.build_meta()))
    load_real = once(lambda: _with_model(origin.load(), prepared))
    meta_model = _or_none(build_meta)
    origin.check_weights(meta_model)
    skipped: list[dict[str, str]] = []
    where: list[int] = []  # how many images come before each skipped file
    walk_notes: list[str] = []
    fetch.settle()  # what the command began fetching is in (no fetch runs on a thread when a check forks)
    progress = read_progress(opts.folder) if opts.resume and source is not None else None
    journal: list[dict[str, Any]] = []  # the records of the inputs already captured, each hashed again
    if progress is not None:  # (under torchrun each rank checks its own shard's)
        with profile.span("resume check", forks=True):
            journal = check_inputs_unchanged(opts.folder, progress)
    unchanged = frozenset(record["path"] for record in journal)  # (their headers are good)
    paths = (
        files.collect(
            source, (opts.folder,), skipped if opts.skip_bad else None, where, walk_notes, unchanged
        )
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
    outdir.in_the_way(
        opts.folder, [t.path for t in targets], opts.formats, commit.owned(opts.folder), opts.png
    )
    if published is not None:
        remote.in_the_way(published, outdir.written([t.path for t in targets], opts.formats))
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
        check_same_run(progress, record, [shown(p) for p in paths])
    elif opts.resume and source is not None and outdir.nothing_written(opts.folder):
        notes.append(
            outdir.starts_again(opts.folder)
        )  # killed before its first batch: the writer starts over
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
    notes += filter(None, [budget.shard_size_note(sizes, opts), budget.zarr_chunk_note(opts)])
    budget.check_fits(needed, opts.folder, already=_bytes_in(opts.folder / SCRATCH) if opts.resume else 0)
    if spec.pretrained and not (progress or {}).get("committing") and not on_ranks:
        load_real()  # weights from a hub or a download: only getting them tells whether they can be had
    return CapturePlan(
        tree, targets, spec, opts, source, paths, config, notes, load_real, sizes, needed, skipped, progress,
        shard, save_as, channels_last, prefix_tokens, class_token, origin.record, origin.rerun, journal,
        published,
    )  # fmt: skip


def _or_none(build: Callable[[], torch.nn.Module]) -> torch.nn.Module | None:
    try:
        return build()
    except Exception:
        return None


def _with_model(
    loaded: tuple[torch.nn.Module, list[str]], prepare: Callable[[torch.nn.Module], torch.nn.Module]
) -> tuple[torch.nn.Module, list[str]]:
    return prepare(loaded[0]), loaded[1]


def _bytes_in(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file())
