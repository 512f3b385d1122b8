"""What a command that wrote files says it wrote: a capture's files and their numbers at a glance,
``--dry-run``'s plan (and its ``--json``), a merge, ``show``'s PNGs; rows of cells aligned in columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..store.formats.stats import summary_cells
from ..units import human_bytes
from .tree_view import shape_text

if TYPE_CHECKING:
    from ..api import CapturePlan, CaptureResult
    from ..capture.merge import MergeResult
    from ..pictures.style import Shown


def capture_summary(result: CaptureResult) -> str:
    """Where the files went and their shapes, one aligned line per tensor (a safetensors file: per key),
    with its numbers at a glance: mean, std, zeros, and NaN / Inf when any."""
    rows = [
        (
            f"{s.file}[{s.key}]" if s.key else s.file,
            s.kind if s.index is None else f"{s.kind} {s.index}",
            str(tuple(s.shape)),
            s.dtype,
            *summary_cells(s.stats),
        )
        for s in result.tensors
    ]
    files = len({s.file for s in result.tensors})
    tensors = f" ({len(rows)} tensors)" if len(rows) != files else ""
    head = f"wrote {files} file(s){tensors} to {result.out}/ in {result.seconds:.1f}s on {result.device}:"
    drawn = [f"drew {len(result.pictures)} PNG(s) beside them (--png)"] if result.pictures else []
    where = f"{result.out}/manifest.json" if isinstance(result.out, str) else result.manifest  # a URL's
    return "\n".join([head, *_aligned(rows), *drawn, f"manifest: {where}"])


def merge_summary(merged: MergeResult) -> str:
    """``merge``: what was joined, and the files."""
    rows = [(f"{s.file}[{s.key}]" if s.key else s.file, str(tuple(s.shape)), s.dtype) for s in merged.tensors]
    head = f"merged {merged.shards} shard(s), {merged.rows} input(s), into {merged.out}/:"
    return "\n".join([head, *_aligned(rows), f"manifest: {merged.manifest}"])


def plan(found: CapturePlan) -> str:
    """``--dry-run``: each module that would be hooked, its class, calls, output shapes and file size."""
    rows = [
        (
            m.name, m.type, f"x{m.calls}" if m.calls and m.calls > 1 else "", shape_text(m.output_shapes),
            human_bytes(_module_bytes(found, m.name)),
        )
        for m in found.modules
    ]  # fmt: skip
    rows_text = _aligned(rows)
    images = len(found.paths) if found.source is not None and not found.source.random else 1
    formats = ", ".join(found.options.formats)
    how = (
        found.options.save_dtype
        if found.options.reduce == "none"
        else f"{found.options.save_dtype}, --reduce {found.options.reduce}"
    )
    # for speed: budget imports torch, which show and stats never need
    from ..capture.budget import kept as files_bytes

    kept = files_bytes(found.sizes, found.options)
    total = f"would write about {human_bytes(kept)} for {images} input(s) ({formats}, {how})"
    if found.total_bytes > kept:
        total += (
            f"; about {human_bytes(found.total_bytes)} of disk at the peak, while the .npy scratch copy"
            " streamed during the run is still there"
        )
    if "zarr" in found.options.formats:
        chunk = found.options.zarr_chunk or found.options.batch_size
        total += f"; tensors.zarr counted uncompressed (Blosc zstd shrinks it), in chunks of {chunk} input(s)"
    ops = sum(1 for m in found.modules if ":" in m.name and m.type.startswith("op "))
    what = " and ".join(
        [f"{len(rows) - ops} module(s)"] * (ops < len(rows)) + [f"{ops} op value(s)"] * bool(ops)
    )
    return "\n".join([f"would hook {what} of {found.tree.requested}:", *rows_text, total])


def _module_bytes(found: CapturePlan, name: str) -> int:
    """What a module's files take in one format (every call of it that is captured)."""
    return sum(size for label, size in found.sizes.items() if label.split("@")[0] == name)


def plan_dict(found: CapturePlan) -> list[dict[str, Any]]:
    """``--dry-run --json``: the modules it would hook, each with ``bytes`` (its files in one format)."""
    return [{**m.as_dict(), "bytes": _module_bytes(found, m.name)} for m in found.modules]


def _aligned(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows of cells as indented lines, every column but the last padded to its widest cell."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  " + "  ".join([*cells, row[-1]]).rstrip())
    return lines


def show_summary(shown: Shown) -> str:
    """``show``: every PNG written, its size, and what it shows."""
    blocks = []
    for r in shown.rendered:
        head = f"wrote {r.path} ({r.width}x{r.height}): {r.name}, image {r.index} of {tuple(r.shape)}"
        if r.kind in ("grid", "attention"):
            rows = -(-r.channels_shown // max(r.columns, 1))
            tiles = f"tiles {r.tile[1]}x{r.tile[0]}"
            what = f"{r.selection}, {r.columns} per row, {rows} row(s), {tiles}, {r.scale}, {r.colormap}"
            what += f", over {r.overlay}, {r.fit}" if r.overlay else ""
        elif r.kind == "rollout":
            what = f"{r.colormap}" + (f" over {r.overlay}, {r.fit}" if r.overlay else "")
        else:
            heat = "mean |activation|" if r.kind == "overlay" else "Grad-CAM"
            target = f" (class {r.target})" if r.target is not None else ""
            what = f"{heat}{target} of {r.channels} channels as a heat map over {r.overlay}, {r.fit}"
        blocks.append(f"{head}\n  {r.layout}; {what}")
    if len(shown.rendered) > 1:
        blocks.append(f"wrote {len(shown.rendered)} PNG(s)")
    return "\n".join(blocks)
