"""What a capture will write, known before it runs: the meta pass's shapes x the number of inputs x the
storage dtype, per layer and in all; and whether that fits on the output folder's disk."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import InputError
from ..model.layers import LayerTarget
from ..model.tree import Inventory
from ..units import human_bytes, parse_size
from .options import CaptureOptions
from .reduce import reduced_shape


def _element_bytes(opts: CaptureOptions) -> int:
    if opts.save_dtype in ("float16", "bfloat16"):
        return 2
    if opts.save_dtype == "keep" and opts.dtype != "float32":
        return 2
    return 4


def per_layer(
    inventory: Inventory,
    targets: list[LayerTarget],
    opts: CaptureOptions,
    rows: int,
    channels_last: set[str] | frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Bytes each target's files take in one format (every call, output / input / gradient as asked)."""
    sizes: dict[str, int] = {}
    for target in targets:
        info = inventory.get(target.path)
        if info is None:
            continue
        calls = 1 if target.call is not None else max(info.calls or 1, 1)
        leaves: list[list[int]] = []
        if opts.what in ("output", "both"):
            outputs = [
                s for n, s in enumerate(info.output_shapes) if target.elements is None or n in target.elements
            ]
            leaves += outputs * (2 if opts.grad else 1)
        if opts.what in ("input", "both"):
            leaves += info.input_shapes
        per_row = sum(
            _numel(reduced_shape(s, opts.reduce, target.path in channels_last)[1:]) for s in leaves if s
        )
        label = target.path if target.call is None else f"{target.path}@{target.call}"
        sizes[label] = per_row * rows * calls * _element_bytes(opts)
    return sizes


def total(sizes: dict[str, int], opts: CaptureOptions) -> int:
    """Peak disk use: every format is a full copy, and the streamed .npy exists while the others are made."""
    return sum(sizes.values()) * (1 + sum(1 for f in opts.formats if f != "npy"))


def kept(sizes: dict[str, int], opts: CaptureOptions) -> int:
    """What the finished capture's files take: one full copy per format (no scratch copy)."""
    return sum(sizes.values()) * len(opts.formats)


def shard_size_note(sizes: dict[str, int], opts: CaptureOptions) -> str | None:
    """A note when ``--shard-size`` does nothing: no safetensors file, or one that is smaller anyway."""
    if opts.shard_size is None:
        return None
    if "safetensors" not in opts.formats:
        return (
            f"--shard-size {opts.shard_size} is ignored: it splits .safetensors files and --format is"
            f" {','.join(opts.formats)} (add --format safetensors)"
        )
    data = sum(sizes.values())
    if data <= parse_size(opts.shard_size):
        return (
            f"--shard-size {opts.shard_size} is more than the capture's about {human_bytes(data)}: one"
            " tensors.safetensors file, no shards"
        )
    return None


def zarr_chunk_note(opts: CaptureOptions) -> str | None:
    """A note when ``--zarr-chunk`` does nothing: no ``tensors.zarr`` to chunk."""
    if opts.zarr_chunk is None or "zarr" in opts.formats:
        return None
    return (
        f"--zarr-chunk {opts.zarr_chunk} is ignored: it chunks tensors.zarr and --format is"
        f" {','.join(opts.formats)} (add --format zarr)"
    )


def check_fits(needed: int, out: Path, already: int = 0) -> None:
    """Stop now, with the figures, when the capture cannot fit on the disk that holds ``out``."""
    existing = next(p for p in [out, *out.absolute().parents] if p.exists())
    free = shutil.disk_usage(existing).free
    if needed - already > free:
        raise InputError(
            f"This capture needs about {human_bytes(needed)} and `{existing}` has {human_bytes(free)} free.",
            "Free some space, choose an --out on a larger disk, or write less: fewer layers or inputs,"
            " --reduce mean, --save-dtype float16, one --format.",
        )


def _numel(dims: list[int]) -> int:
    count = 1
    for d in dims:
        count *= d
    return count
