"""Every option of a capture checked on its own and against the others, and its output folder, before any
work (``api.plan`` runs this first, so ``--dry-run`` and the run refuse alike)."""

from __future__ import annotations

import os

import torch

from .. import units
from ..errors import UsageError, check_choice
from ..store.folder import outdir, profile
from ..store.folder.lock import check_free
from ..store.formats import choices, zarr
from . import parallel, reduce
from .options import CaptureOptions
from .runner import DTYPES

#: The largest --batch-size taken: far beyond any memory, below the sizes Python's own indexing refuses.
MAX_BATCH = 1 << 20


def check_options(opts: CaptureOptions) -> None:
    """Every option on its own and against the others, and the output folder, before any work."""
    check_choice("--what", opts.what, ("output", "input", "both"))
    check_choice("--dtype", opts.dtype, tuple(DTYPES))
    check_choice("--reduce", opts.reduce, reduce.REDUCTIONS)
    choices.check_save_dtype(
        opts.save_dtype, opts.formats, {torch.bfloat16} if opts.dtype == "bfloat16" else set()
    )
    if opts.batch_size < 1:
        raise UsageError(f"--batch-size {opts.batch_size} is not positive.", "Use 1 or more.")
    if opts.batch_size > MAX_BATCH:
        raise UsageError(
            f"--batch-size {opts.batch_size} is more images than one forward pass can hold.",
            f"Use at most {MAX_BATCH} (a few dozen is usual; out of memory says to use fewer).",
        )
    if opts.workers is not None and opts.workers < 0:
        raise UsageError(f"--workers {opts.workers} is negative.", "Use 0 (decode in process) or more.")
    if opts.workers is not None and opts.workers > (most := max(64, 4 * (os.cpu_count() or 1))):
        raise UsageError(
            f"--workers {opts.workers} is more decoding processes than this machine can use.",
            f"Use at most {most}, or leave --workers out for a number that suits the machine.",
        )
    if opts.compile and opts.grad:
        raise UsageError(
            "--compile and --grad: hookdump compiles the forward pass only.",
            "Drop --compile to capture gradients (or --grad to compile).",
        )
    if opts.target is not None and opts.target < 0:
        raise UsageError(f"--target {opts.target} is negative.", "Give a class index, 0 or more.")
    if opts.shard_size is not None:
        units.parse_size(opts.shard_size)
    if opts.zarr_chunk is not None and not 1 <= opts.zarr_chunk <= MAX_BATCH:
        raise UsageError(
            f"--zarr-chunk {opts.zarr_chunk} is not a number of inputs from 1 to {MAX_BATCH}.",
            "Use 1 or more (the inputs in a chunk of tensors.zarr; leave it out for --batch-size).",
        )
    if opts.max_queue_mb is not None and not 0 <= opts.max_queue_mb < 2**40:  # (NaN fails it too)
        raise UsageError(
            f"--max-queue-mb {opts.max_queue_mb} is not a size in MB.",
            "Give 0 or more (0: each batch reaches the disk before the next one runs), or leave it out.",
        )
    if "zarr" in opts.formats:
        zarr.require()  # an optional package: one paragraph naming the extra, before any work
    if opts.shard is not None:
        parallel.parse_shard(opts.shard)
    profile.check_target()  # HOOKDUMP_PROFILE's file: never a user's
    check_free(opts.folder)  # a folder another run is writing says so, whatever it holds
    if parallel.check_ranks(opts.folder, opts.overwrite, opts.resume):  # each rank resumes its own folder
        outdir.check(opts.folder, overwrite=True, resume=False)  # the folder itself: writable, on a disk
    else:
        outdir.check(opts.folder, opts.overwrite, opts.resume)


def check_op_values(names: list[str], ops: list[str], opts: CaptureOptions) -> list[str]:
    """Refuse what op values (``ops``: the targets that are ``PATH:OP``, among ``names``) cannot do; notes
    for options that pass them by."""
    if not ops:
        return []
    if opts.compile:
        raise UsageError(
            f"--compile cannot capture op values ({ops[0]}): the compiled graph runs the forward's torch"
            " functions itself, where no hook sees them, so they would never be captured.",
            "Drop --compile (op values are watched only while their module's forward runs).",
        )
    if opts.what == "input" and len(ops) == len(names):
        raise UsageError(
            f"--what input saves what a module is called with, and {ops[0]} is a value inside a forward: it"
            " has no input of its own.",
            "Capture the op before it (`hookdump list-modules MODEL --ops` lists them), or drop --what.",
        )
    if opts.what != "output":
        return [f"--what {opts.what}: op values ({', '.join(ops[:3])}) are saved as values, with no input"]
    return []
