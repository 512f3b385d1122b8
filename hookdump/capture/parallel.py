"""One capture spread over processes or machines: ``--shard I/N`` takes every N-th share of the batches
(whole batches, so every image meets the same batch as in one process), ``merge`` (``merge.py``) joins the
shard folders into the single-process result, and under ``torchrun`` each rank captures its shard and rank 0
merges (an interrupted rank keeps its folder, ``OUT/.hookdump-ranks/rank-R``, for ``--resume``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import HookdumpError, InputError, Interrupted, UsageError
from ..inputs import shards
from ..inputs.fetch import shown
from ..store.folder import zarrjoin
from ..store.folder.journal import NO_BYTE_CHANGED, read_progress
from ..store.folder.reader import Capture, read_manifest
from ..store.formats.zarr import ZARR_STORE
from .merge import Joined, MergeResult, merge, zarr_rows
from .options import CaptureOptions

if TYPE_CHECKING:  # types only
    from ..inputs.spec import InputSpec

RANKS_FOLDER = ".hookdump-ranks"


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
    same = {k: v for k, v in options.items() if k not in ("shard", *NO_BYTE_CHANGED)}
    text = json.dumps([same, inputs], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shard_of(
    paths: list[Path], source: InputSpec, opts: CaptureOptions, record: dict[str, Any]
) -> tuple[list[Path], dict[str, Any]]:
    """``--shard I/N``: this shard's whole batches of the inputs, and what the manifest says of it."""
    index, count = parse_shard(opts.shard or "")
    if source.random:
        raise UsageError("--shard splits image inputs; --random-input is one.", "Drop --shard.")
    tar = shards.whole_shards(paths, index, count)  # at least as many tar shards as parts: whole ones
    first, last = tar if tar is not None else shard_rows(len(paths), opts.batch_size, index, count)
    if first == last:
        batches = -(-len(paths) // opts.batch_size)
        raise UsageError(
            f"--shard {opts.shard} gets no batch: {len(paths)} input(s) make {batches} batch(es) of"
            f" {opts.batch_size}.",
            "Use fewer shards, or a smaller --batch-size.",
        )
    run = run_id(record, [shown(p) for p in paths])
    return paths[first:last], {
        "index": index,
        "count": count,
        "first_row": first,
        "rows": last - first,
        "run": run,
        **({"split": "tar shards"} if tar is not None else {}),
    }


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
    out, device = opts.folder, opts.device
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
    folder, result = opts.folder / RANKS_FOLDER, None
    failures: list[str | None] = [None] * size
    dist.all_gather_object(failures, failure)
    failed = [f for f in failures if f]
    if failed:
        if rank == 0 and not opts.resume:  # nothing of a failed run stays (a resumed one keeps its own)
            shutil.rmtree(folder, ignore_errors=True)
            if created and opts.folder.is_dir() and not any(opts.folder.iterdir()):
                opts.folder.rmdir()
        raise InputError(failed[0], "The other ranks stopped with it; fix that rank's problem and rerun.")
    parts = [folder / f"rank-{r}" for r in range(shards)]
    joined = _zarr_on_ranks(parts, folder / ZARR_STORE) if "zarr" in opts.formats else None
    if rank == 0:
        result = merge(parts, opts.folder, overwrite=opts.overwrite or opts.resume, joined=joined)
        shutil.rmtree(folder, ignore_errors=True)
    dist.barrier()
    return result


def _zarr_on_ranks(parts: list[Path], store: Path) -> Joined | None:
    """Each rank's rows into the chunks of the run's ``tensors.zarr`` wholly its own (rank 0 creates the
    arrays first; ``merge`` writes the chunks two ranks share); rank 0 gets the store and every rank's stats.
    A rank that fails fails the run, with its message."""
    import torch.distributed as dist

    rank, size, _ = world()
    captures = [Capture(p) for p in parts]
    join = zarrjoin.plan(captures, zarr_rows(captures[0].manifest["options"]))
    if rank == 0:
        zarrjoin.create(join, store, captures)
    dist.barrier()
    mine: list[list[dict[str, Any]]] | str = []
    try:
        mine = [zarrjoin.write_part(join, store, rank, captures[rank])] if rank < len(parts) else []
    except (OSError, HookdumpError) as exc:
        mine = f"rank {rank}: writing its rows of `{store}`: {exc}"
    answers: list[list[list[dict[str, Any]]] | str] = [[]] * size
    dist.all_gather_object(answers, mine)
    failed = [a for a in answers if isinstance(a, str)]
    if failed:
        raise InputError(failed[0], "The other ranks stopped with it; fix that rank's problem and rerun.")
    return Joined(store, [s for a in answers if not isinstance(a, str) for s in a]) if rank == 0 else None
