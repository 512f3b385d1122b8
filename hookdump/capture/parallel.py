"""One capture spread over processes or machines: ``--shard I/N`` takes every N-th share of the batches
(whole batches, so every image meets the same batch as in one process), ``merge`` joins the shard folders
into the single-process result, and under ``torchrun`` each rank captures its shard and rank 0 merges
(an interrupted rank keeps its folder, ``OUT/.hookdump-ranks/rank-R``, for ``--resume``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import HookdumpError, InputError, Interrupted, UsageError
from ..inputs.files import skipped_note
from ..store import outdir
from ..store.commit import owned
from ..store.lock import check_free
from ..store.manifest import MANIFEST, entry_stem
from ..store.outdir import read_progress
from ..store.reader import Capture, read_manifest
from ..store.records import Captured, key_from_json
from ..store.sinks import SavedTensor, Writer
from ..units import parse_size
from .options import CaptureOptions

MERGE_CHUNK_ROWS = 256
RANKS_FOLDER = ".hookdump-ranks"
SKIP_NOTE = "--skip-bad left out "


def parse_shard(text: str) -> tuple[int, int]:
    """``2/4`` -> ``(2, 4)``: shard 2 of 4, counted from 0."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if count < 1 or not 0 <= index < count:
        raise UsageError(
            f"--shard `{text}` is not I/N with 0 <= I < N.", "Write it like --shard 0/4 (shards 0/4 ... 3/4)."
        )
    return index, count


def shard_rows(rows: int, batch_size: int, index: int, count: int) -> tuple[int, int]:
    """The rows ``[start, end)`` of shard ``index`` of ``count``: a contiguous run of whole batches."""
    batches = -(-rows // batch_size)
    first, last = batches * index // count, batches * (index + 1) // count
    return min(first * batch_size, rows), min(last * batch_size, rows)


def run_id(options: dict[str, Any], inputs: list[str]) -> str:
    """What every shard of one run shares: its options (but where it writes and which shard) and inputs."""
    same = {k: v for k, v in options.items() if k not in ("out", "shard", "workers")}
    text = json.dumps([same, inputs], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class MergeResult:
    """What ``merge`` wrote."""

    out: Path
    manifest: Path
    shards: int
    rows: int
    tensors: list[SavedTensor]


def merge(shard_dirs: list[Path], out: Path, overwrite: bool = False) -> MergeResult:
    """Join the folders of ``capture --shard I/N`` (all N, each once, of one run) into ``out``, as one
    process would have written it."""
    manifests = [_shard_manifest(d) for d in shard_dirs]
    _check_complete_set(shard_dirs, manifests)
    order = sorted(range(len(manifests)), key=lambda i: manifests[i]["shard"]["index"])
    captures = [Capture(shard_dirs[i]) for i in order]
    first = captures[0].manifest
    entries = captures[0].entries  # one manifest entry per tensor, whatever formats hold it
    for capture in captures[1:]:
        if set(capture.entries) != set(entries):
            raise InputError(
                f"`{capture.path}` holds other tensors than `{captures[0].path}`.",
                "Shards of one run hold the same layers; capture the shards again with one command.",
            )
    options = first["options"]
    formats = tuple(options["format"].split(","))
    _check_out(out, shard_dirs, sorted({str(e["layer"]) for e in entries.values()}), formats, overwrite)
    shard_bytes = None
    if options.get("shard_size"):
        shard_bytes = parse_size(options["shard_size"])
    with Writer(out, formats, "keep", overwrite, shard_bytes=shard_bytes, command="merge") as writer:
        for capture in captures:
            for stem, entry in entries.items():
                _append(writer, entry, capture[stem])
        records = [_captured(stem, entry, captures) for stem, entry in entries.items()]
        header = _merged_header(first, [c.manifest for c in captures], shard_dirs, out)
        saved = writer.commit(records, header)
    return MergeResult(out, out / MANIFEST, len(captures), len(header["inputs"]), saved)


def _check_out(
    out: Path, shards: list[Path], layers: list[str], formats: tuple[str, ...], overwrite: bool
) -> None:
    """Refuse, before any work, an ``out`` that merge may not write: one of the shards it reads, a folder
    that cannot be written, a capture there (without --overwrite), a user's file of a name it writes."""
    for folder in shards:
        if folder.resolve() == out.resolve():
            raise UsageError(
                f"--out `{out}` is one of the shards being merged: the merge would replace files it reads.",
                "Merge into a new folder: -o merged.",
            )
    check_free(out)
    outdir.check(out, overwrite, resume=False)
    outdir.in_the_way(out, layers, formats, owned(out), command="merge")


def _shard_manifest(folder: Path) -> dict[str, Any]:
    manifest = read_manifest(folder)
    if manifest is None or "shard" not in manifest:
        raise InputError(
            f"`{folder}` is not a shard of a capture (no manifest.json with a `shard` entry).",
            "Pass the --out folders of `hookdump capture --shard I/N`.",
        )
    if manifest.get("complete") is False:
        raise InputError(
            f"Shard `{folder}` is incomplete.", "Finish it first: rerun its command with --resume."
        )
    return manifest


def _check_complete_set(dirs: list[Path], manifests: list[dict[str, Any]]) -> None:
    runs = {m["shard"]["run"] for m in manifests}
    if len(runs) > 1:
        raise InputError(
            "These shards come from different runs (other options or inputs).",
            "Merge only the shards of one command, run with --shard 0/N ... N-1/N.",
        )
    count = manifests[0]["shard"]["count"]
    for folder, manifest in zip(dirs, manifests, strict=True):
        if manifest["shard"]["count"] != count:
            raise InputError(
                f"These shards split the inputs differently: `{dirs[0]}` is shard"
                f" {manifests[0]['shard']['index']}/{count}, `{folder}` is shard"
                f" {manifest['shard']['index']}/{manifest['shard']['count']}.",
                "Merge the folders of one split, all N of --shard 0/N ... N-1/N.",
            )
    seen: dict[int, Path] = {}
    for folder, manifest in zip(dirs, manifests, strict=True):
        index = manifest["shard"]["index"]
        if index in seen:
            raise InputError(
                f"Shard {index}/{count} is given twice: `{seen[index]}` and `{folder}`.",
                "Pass each shard once.",
            )
        seen[index] = folder
    missing = [f"{i}/{count}" for i in range(count) if i not in seen]
    if missing:
        raise InputError(f"Shards missing: {', '.join(missing)}.", "Capture them, then merge all N together.")


def _append(writer: Writer, entry: dict[str, Any], array: Any) -> None:
    key = key_from_json([entry["layer"], entry["kind"], entry["index"], entry["call"]])
    for start in range(0, int(array.shape[0]), MERGE_CHUNK_ROWS):
        rows = array[start : start + MERGE_CHUNK_ROWS]
        tensor = rows.clone() if isinstance(rows, torch.Tensor) else torch.from_numpy(rows.copy())
        writer.append({key: tensor})
    writer.source_dtypes[key] = getattr(torch, entry["source_dtype"])


def _captured(stem: str, entry: dict[str, Any], captures: list[Any]) -> Captured:
    """The record ``commit`` names files from: ``calls_per_forward`` only matters for the ``@k`` in names."""
    record = Captured(
        entry["layer"],
        entry["kind"],
        entry["index"],
        entry["call"],
        1,
        layout=entry.get("layout"),
        windows=entry.get("windows"),
        order=entry.get("order"),
    )
    if record.stem != stem:
        record.calls_per_forward = 2
    record.modified_in_place = any(
        e.get("modified_in_place_after_hook", False)
        for c in captures
        for e in c.manifest["tensors"]
        if entry_stem(e) == stem
    )
    return record


def _merged_header(
    first: dict[str, Any], manifests: list[dict[str, Any]], dirs: list[Path], out: Path
) -> dict[str, Any]:
    header = {k: v for k, v in first.items() if k not in ("tensors", "shard")}
    header["options"] = {**first["options"], "out": str(out), "shard": None}
    header["inputs"] = [record for m in manifests for record in m["inputs"]]
    header["skipped"] = [record for m in manifests for record in m.get("skipped", [])]
    header["stopped_early"] = any(m.get("stopped_early") for m in manifests)
    if first.get("grad"):
        header["grad"] = {**first["grad"], "classes": [c for m in manifests for c in m["grad"]["classes"]]}
    notes = [n for m in manifests for n in m.get("notes", []) if not n.startswith(SKIP_NOTE)]
    if header["skipped"]:  # one note for all, not one per shard
        notes.append(skipped_note(header["skipped"]))
    header["notes"] = [*dict.fromkeys(notes), f"merged from {len(manifests)} shards"]
    header["merged_from"] = [str(d) for d in dirs]
    return header


def world() -> tuple[int, int, int]:
    """``(rank, world size, local rank)`` under torchrun; ``(0, 1, 0)`` otherwise."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0"))


def check_no_shard(shard: str | None) -> None:
    """Under torchrun the ranks split the inputs: a --shard of the user's is refused up front."""
    if shard is not None:
        raise UsageError(
            f"--shard {shard} under torchrun: torchrun's ranks already split the inputs between them.",
            "Drop --shard (each rank captures its share), or run --shard I/N without torchrun.",
        )


def check_ranks(out: Path, overwrite: bool, resume: bool) -> bool:
    """Whether this run resumes the ranks' folders of a capture interrupted under torchrun; a run that
    would start over without being told to (no --resume, no --overwrite) or outside torchrun is refused."""
    folders = sorted((out / RANKS_FOLDER).glob("rank-*"))
    if not folders or overwrite:
        return False
    if not resume:
        raise UsageError(
            f"`{out}` holds a capture interrupted under torchrun ({len(folders)} rank folder(s) in"
            f" {RANKS_FOLDER}).",
            "Rerun the same torchrun command with --resume to continue it, or with --overwrite to start"
            " again.",
        )
    if world()[1] == 1:
        raise UsageError(
            f"`{out}` holds a capture interrupted under torchrun ({RANKS_FOLDER}): one process cannot"
            " resume it.",
            "Resume it with the same torchrun command (the same --nproc-per-node) and --resume, or pass"
            " --overwrite to start again.",
        )
    return True


def capture_on_ranks(
    run_shard: Callable[[str, Path, str, bool], None], opts: CaptureOptions, shards: int
) -> MergeResult | None:
    """Under torchrun: rank R < ``shards`` captures shard R into ``OUT/.hookdump-ranks/rank-R`` (the others
    idle); when every rank has finished, rank 0 merges them into ``out`` (the others get None). A rank that
    fails fails the run, with its message; an interrupted rank keeps its folder for --resume."""
    import torch.distributed as dist

    rank, _, local = world()
    out, device = opts.out, opts.device
    if device == "auto" and torch.cuda.is_available():
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    folder = out / RANKS_FOLDER
    mine = folder / f"rank-{rank}"
    created = not out.exists()
    failure: str | None = None
    try:
        try:
            if rank == 0 and not opts.resume:  # a fresh start (or --overwrite): no old rank folder stays
                shutil.rmtree(folder, ignore_errors=True)
            dist.barrier()
            try:
                resume = opts.resume and read_progress(mine) is not None
                if rank < shards and not (opts.resume and _complete(mine)):  # done before it was stopped
                    run_shard(f"{rank}/{shards}", mine, device, resume)
            except HookdumpError as exc:
                failure = f"rank {rank}: {exc.paragraph()}"
            except Exception as exc:
                failure = f"rank {rank}: {type(exc).__name__}: {exc}"
            return _gather_and_merge(failure, opts, shards, created)
        except KeyboardInterrupt as exc:  # its folder stays, for --resume: no gather (the others stop too)
            raise _stopped(exc, rank, mine, shards) from None
    finally:
        dist.destroy_process_group()


def _complete(folder: Path) -> bool:
    return (read_manifest(folder) or {}).get("complete") is True


def _stopped(exc: KeyboardInterrupt, rank: int, mine: Path, shards: int) -> Interrupted:
    """What an interrupted rank says: how far its shard got, as one process would say it."""
    code, detail = getattr(exc, "exit_code", 130), getattr(exc, "detail", Interrupted(130).detail)
    if rank >= shards or _complete(mine):
        share = f"its shard is complete in `{mine}`" if rank < shards else "it had no batch to capture"
        detail = f"{share}. Rerun the same command with --resume to finish (or --overwrite to start again)."
    return Interrupted(code, f"rank {rank}: {detail}")


def _gather_and_merge(
    failure: str | None, opts: CaptureOptions, shards: int, created: bool
) -> MergeResult | None:
    """Every rank says how its share went; if all went well rank 0 merges the shards into ``out``."""
    import torch.distributed as dist

    rank, size, _ = world()
    folder, result = opts.out / RANKS_FOLDER, None
    failures: list[str | None] = [None] * size
    dist.all_gather_object(failures, failure)
    failed = [f for f in failures if f]
    if failed:
        if rank == 0 and not opts.resume:  # nothing of a failed run stays (a resumed one keeps its own)
            shutil.rmtree(folder, ignore_errors=True)
            if created and opts.out.is_dir() and not any(opts.out.iterdir()):
                opts.out.rmdir()
        raise InputError(failed[0], "The other ranks stopped with it; fix that rank's problem and rerun.")
    if rank == 0:
        parts = [folder / f"rank-{r}" for r in range(shards)]
        result = merge(parts, opts.out, overwrite=opts.overwrite or opts.resume)
        shutil.rmtree(folder, ignore_errors=True)
    dist.barrier()
    return result
