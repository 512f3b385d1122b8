"""One capture run from its plan: the real model, the hooks, the batches, a checkpoint after each batch,
an interruption that keeps what reached the disk, and the files and manifest at the end."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .. import units
from ..errors import Interrupted
from ..inputs import classfolders, files, loader
from ..inputs.fetch import shown
from ..inputs.files import skipped_note
from ..inputs.records import finisher, frame_notes
from ..inputs.records import records as input_records
from ..model.device import resolve_device
from ..model.spec import ResolvedName
from ..store.folder import manifest, profile
from ..store.folder.captured import Key
from ..store.folder.reader import finished_manifest
from ..store.folder.writer import Writer
from . import entries, header, parallel, prepare, shapes
from .behind import Behind, queue_bytes
from .compiled import Compiled
from .landing import Landing, landed
from .reduce import token_layout
from .results import CapturePlan, CaptureResult, from_manifest
from .runner import Run, forward_all


def run(
    found: CapturePlan,
    layer_specs: list[str],
    started: float,
    on_batch: Callable[[int, int, int], None] | None,
) -> CaptureResult:
    """Capture what ``found`` planned; see ``api.capture``."""
    opts, spec, source = found.options, found.spec, found.source
    assert source is not None and found.load is not None
    name = ResolvedName(found.tree.requested, found.tree.timm_name)
    torch_device = resolve_device(opts.device)
    shard_bytes = units.parse_size(opts.shard_size) if opts.shard_size else None
    options_record = header.options_record(source, list(layer_specs), spec, opts, found.rerun)
    input_list = [shown(p) for p in found.paths]
    with Writer(
        opts.folder,
        opts.formats,
        opts.save_dtype,
        opts.overwrite,
        opts.resume,
        shard_bytes,
        found.total_bytes,
        planned=(found.progress, found.journal),
        zarr_rows=opts.zarr_chunk or opts.batch_size,
    ) as writer:
        if opts.overwrite:  # what an interrupted torchrun capture left goes too
            shutil.rmtree(opts.folder / parallel.RANKS_FOLDER, ignore_errors=True)
        if writer.committed:  # --resume of a run stopped in its final moves: the writer finished them
            data = finished_manifest(opts.folder)
            data["notes"] = [*data["notes"], *writer.notes]
            return from_manifest(opts.folder, data, time.perf_counter() - started)
        net, weight_notes = found.load()
        net.to(torch_device)
        if torch_device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(torch_device)
        landing = Landing(torch_device)
        recorder = prepare.recorder(net, found, landing)
        compiled = Compiled(net, name.requested) if opts.compile else None
        state = prepare.RunState(writer.resumed, found.skipped)
        if writer.resumed is not None:
            recorder.restore(writer.resumed["recorder"])
        run = Run(torch_device, opts.dtype, opts.channels_last, opts.grad, opts.target)
        watch = shapes.Watch(found.paths, found.config["input_size"], writer.tensors.files)

        run_record = {"options": options_record, "inputs": input_list}
        writer.start(run_record, None if source.random else input_list)
        finish = finisher(found.paths, source)  # the records the decoding workers made, finished

        def write(item: tuple[dict[Key, torch.Tensor], Callable[[], None], tuple[Any, ...] | None]) -> None:
            tensors, landed, batch_end = item
            start = profile.clock()
            landed()  # from CUDA: the batch's copies are on the host
            profile.add("landing", start)
            while tensors:  # each tensor let go of once on disk: what the writer holds shrinks as it goes
                key = next(iter(tensors))
                tensor = tensors.pop(key)
                writer.tensors.append({key: tensor}, recorder.copies.made_as)
                nbytes = tensor.nbytes
                landing.pool.give(tensor)  # its buffer serves a later batch
                del tensor
                behind.release(nbytes)
            if batch_end is None:  # one tensor handed over at hook time (``hand``)
                return
            progress, classes, images, records = batch_end
            writer.checkpoint(progress, classes, [finish(record) for record in records])
            if on_batch is not None:
                start = profile.clock()
                on_batch(images, len(found.paths) or 1, writer.tensors.bytes_written())
                profile.add("on_batch", start)  # the progress line, and malloc_trim in the console script

        behind = Behind(write, queue_bytes(opts.max_queue_mb))
        landing.bound(behind.max_bytes)

        def hand(key: Key, tensor: torch.Tensor) -> None:
            """A copy final at hook time, to the writer now (``Copies.hand``)."""
            watch.check({key: tensor})
            start = profile.clock()
            behind.put(({key: tensor}, landed, None), tensor.nbytes)
            profile.add("writer wait", start)

        # Each copy to the writer at hook time once a pass's outweigh the queue (0: batches written whole)
        if torch_device.type == "cpu" and not opts.grad and compiled is None and behind.max_bytes:
            recorder.copies.offer(hand, behind.max_bytes)

        def sink(tensors: dict[Key, torch.Tensor], batch: loader.Batch, classes: list[int]) -> None:
            watch.check(tensors)
            state.advance(batch, classes)
            progress = state.progress(len(input_list), recorder)
            start = profile.clock()
            nbytes = sum(t.nbytes for t in tensors.values())
            landed = recorder.fence()
            batch_end = (progress, classes, state.images, batch.records)
            behind.put((tensors, landed, batch_end), nbytes)
            profile.add("writer wait", start)

        def stopped(exc: KeyboardInterrupt) -> Interrupted:
            """Keep what reached the disk (its last checkpoint), say so in the folder and to the user."""
            code = exc.exit_code if isinstance(exc, Interrupted) else 130
            total = len(found.paths) or 1
            advice = manifest.resume_advice(opts.overwrite)
            writer.suspend(manifest.incomplete(options_record, writer.images_done, total, advice))
            return Interrupted(
                code, _interrupted_text(opts.folder, writer.images_done, total, writer, advice)
            )

        batches = prepare.batches(found, state.batches)
        loop = profile.add("setup", started)
        try:
            with watch.blaming_sizes(name.requested):
                forward_all(net, recorder, prepare.timed(batches, watch), run, name.requested, sink, compiled)
            start = profile.add("loop", loop)
            behind.close()
            profile.add("writer drain", start)
        except KeyboardInterrupt as exc:
            behind.close(errors=False)  # the batches already computed still reach the disk
            raise stopped(exc) from None
        finally:
            behind.close(errors=False)
            batches.close()  # decoding workers exit now, not when the interpreter does
        if found.paths and state.skipped and {shown(p) for p in found.paths} <= state.skipped_paths:
            raise files.none_readable(state.skipped)  # every image failed to decode (--skip-bad)
        results = recorder.entries()
        entries.set_layouts(results, writer.tensors.files, found, net)
        notes = found.tree.notes + weight_notes + found.notes + writer.notes
        notes += entries.capture_notes(recorder, results)
        if compiled is not None:
            notes += compiled.notes()
        if writer.resumed is not None:
            notes.append(f"resumed after {writer.resumed['images']} of {len(found.paths)} images")
        if state.skipped:
            notes.append(skipped_note(state.skipped))
        notes += filter(None, [watch.note()])
        notes += writer.tensors.nonfinite_notes(results)  # NaN / Inf in a saved tensor, naming it
        with profile.span("records"):
            skipped = state.skipped_paths
            kept = [p for p in found.paths if str(p) not in skipped] if skipped else found.paths
            records = input_records(kept, source, found.config, writer.records, finish)
            notes += frame_notes(records) + classfolders.note(records)
        extra = {**prepare.run_record(recorder, run, opts, state.classes), "skipped": state.skipped}
        extra["notes"] = notes
        extra["writer_queue"] = {
            "max_bytes": behind.max_bytes, "peak_bytes": behind.peak,
            "buffers_made": landing.pool.made, "buffers_reused": landing.pool.reused,
            "handed_at_hook": recorder.copies.hand is not None,
        }  # fmt: skip
        if torch_device.type == "cuda":
            extra["cuda_max_memory_allocated"] = torch.cuda.max_memory_allocated(torch_device)
        extra["compile"] = compiled.record() if compiled is not None else None
        if found.shard is not None:
            extra["shard"] = found.shard
        made = header.header(spec, name, str(torch_device), found.config, records, options_record, extra)
        made["model"] |= {
            "num_prefix_tokens": found.prefix_tokens, "class_token": found.class_token,
            "num_patch_tokens": (token_layout(net) or (None, None))[0], **found.model_record
        }  # fmt: skip
        start = profile.clock()
        try:
            saved = writer.commit(results, made)
        except KeyboardInterrupt as exc:  # while .pt / .safetensors were made: every batch is on disk
            if writer.committed:
                raise
            raise stopped(exc) from None
        profile.add("commit", start)
        notes += writer.commit_notes
    profile.dump({"run": time.perf_counter() - started})
    return CaptureResult(
        out=opts.folder,
        manifest=opts.folder / manifest.MANIFEST,
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


def _interrupted_text(out: Path, done: int, total: int, writer: Writer, advice: str) -> str:
    if not writer.kept:
        return "nothing of this run was kept."
    return f"{done} of {total} images reached `{out}`. {advice[0].upper()}{advice[1:]}."
