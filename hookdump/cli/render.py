"""Everything hookdump shows on a terminal: module trees, capture tables, notes, JSON."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

from ..store.formats import nonfinite
from ..store.formats.stats import summary_cells
from ..units import human_bytes

if TYPE_CHECKING:
    from ..api import CapturePlan, CaptureResult, ModuleTree
    from ..capture.merge import MergeResult
    from ..model.ops import OpInfo
    from ..model.tree import ModuleInfo
    from ..pictures.style import Shown

#: One piece of a line: its text and its rich style ("" for none).
Piece = tuple[str, str]

PIPE, TEE, LAST, BLANK = "│   ", "├── ", "└── ", "    "


def human_count(n: int) -> str:
    """1234567 -> '1.2M'."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def shape_text(shapes: list[list[int]]) -> str:
    return ", ".join("(" + ", ".join(str(d) for d in s) + ")" for s in shapes)


def module_label(info: ModuleInfo, hidden: int = 0) -> list[Piece]:
    """One line: path, class, own params, shapes, calls, timm feature levels (feat:K), modules folded by
    --depth, why it never fires."""
    label: list[Piece] = [(info.name, "bold"), ("  ", ""), (info.type, "cyan")]
    if info.params:
        label.append((f"  {human_count(info.params)} params", "green"))
    if info.output_shapes:
        label.append((f"  -> {shape_text(info.output_shapes)}", "magenta"))
    if info.calls is not None and info.calls > 1:
        label.append((f"  x{info.calls} calls", "yellow"))
    if info.feature_levels:
        label.append(("  " + " ".join(f"feat:{k}" for k in info.feature_levels), "blue"))
    if hidden:
        label.append((f"  (+{hidden} below)", "dim"))
    if info.reason:
        label.append((f"  [{info.reason}]", "bold yellow" if info.container else "bold red"))
    return label


def modules_json(tree: ModuleTree) -> list[dict[str, Any]]:
    """``list-modules --json``: each module's object; with ``--ops``, its own ops (``ops``), and the root's
    own ops first, as a module named ``""``."""
    ops = tree.inventory.ops
    if ops is None:
        return [m.as_dict() for m in tree.modules]
    own = [op.as_dict() for op in ops.get("", [])]
    root = [{"name": "", "type": tree.inventory.root_type, "ops": own}] if own else []
    return root + [m.as_dict() | {"ops": [op.as_dict() for op in ops.get(m.name, [])]} for m in tree.modules]


def op_label(op: OpInfo) -> list[Piece]:
    """One op of a module's own forward: ``PATH:OP``, as -l takes it, and its output shape."""
    label: list[Piece] = [(op.name, "bold blue"), ("  op", "cyan")]
    if op.shapes:
        label.append((f"  -> {shape_text(op.shapes)}", "magenta"))
    if op.calls > 1:
        label.append((f"  in {op.calls} calls", "yellow"))
    if op.inplace:
        label.append(("  in place", "dim"))
    return label


def tree_lines(tree: ModuleTree) -> list[list[Piece]]:
    """The model as tree lines (a flat list for --filter / --leaves), paths exactly as --layer takes them."""
    inv = tree.inventory
    title = (
        tree.requested
        if tree.timm_name in (None, tree.requested)
        else f"{tree.requested} (timm {tree.timm_name})"
    )
    lines: list[list[Piece]] = [[(title, "bold"), ("  ", ""), (inv.root_type, "cyan")]]
    ops = inv.ops or {}
    if tree.flat:
        shown = tree.modules
        for i, info in enumerate(shown):
            last = i == len(shown) - 1
            lines.append([(LAST if last else TEE, "dim"), *module_label(info)])
            mine = ops.get(info.name, [])
            lines += [
                [((BLANK if last else PIPE) + (LAST if j == len(mine) - 1 else TEE), "dim"), *op_label(op)]
                for j, op in enumerate(mine)
            ]
        return lines
    keep = None if tree.shown is None else set(tree.shown)
    hidden = _folded_counts(tree)

    def grow(path: str, names: list[str], prefix: str) -> None:
        kept = [n for n in names if keep is None or n in keep]
        mine = ops.get(path, []) if keep is None or path in keep or not path else []
        for j, op in enumerate(mine):  # the module's own ops first, then its children
            lines.append(
                [(prefix + (LAST if j == len(mine) - 1 and not kept else TEE), "dim"), *op_label(op)]
            )
        for i, name in enumerate(kept):
            info = inv.get(name)
            assert info is not None
            last = i == len(kept) - 1
            lines.append(
                [(prefix + (LAST if last else TEE), "dim"), *module_label(info, hidden.get(name, 0))]
            )
            grow(name, info.children, prefix + (BLANK if last else PIPE))

    grow("", inv.top_level, "")
    return lines


def _folded_counts(tree: ModuleTree) -> dict[str, int]:
    """For --depth N: how many modules sit below each module of depth N."""
    counts: dict[str, int] = {}
    if tree.depth is None:
        return counts
    for info in tree.inventory.modules:
        if info.depth > tree.depth:
            ancestor = ".".join(info.name.split(".")[: tree.depth])
            counts[ancestor] = counts.get(ancestor, 0) + 1
    return counts


def tree_summary(tree: ModuleTree) -> str:
    """Modules (shown of all), how many fire, how many never do and why, parameters, input size."""
    inv = tree.inventory
    shown = tree.modules
    containers = sum(1 for m in shown if m.container)
    never_called = sum(1 for m in shown if m.fires is False and not m.container)
    params = sum(m.params for m in shown)
    total = sum(m.params for m in inv.modules)
    head = (
        f"{len(shown)} modules" if tree.shown is None else f"{len(shown)} shown of {len(inv.modules)} modules"
    )
    if inv.traced_on:
        fires = sum(1 for m in shown if m.fires)
        never = (
            f"{containers + never_called} never fire ({containers} containers, {never_called} never called)"
        )
        state = f"{fires} fire, {never}"
    else:
        state = f"{containers} containers (never fire), calls unknown"
    size = "x".join(str(d) for d in inv.input_size)
    param_text = f"{human_count(params)} parameters"
    if tree.shown is not None:
        param_text += f" (of {human_count(total)})"
    traced = f"traced on {inv.traced_on}" if inv.traced_on else "not traced: --no-shapes"
    return f"{head}, {state}, {param_text}; input {size} ({traced})"


def use_color() -> bool:
    """Colour on a terminal only; ``NO_COLOR`` and ``TERM=dumb`` turn it off, ``FORCE_COLOR`` on."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def print_tree(tree: ModuleTree) -> None:
    """The tree and its summary on stdout: plain text on a pipe or with NO_COLOR, rich on a terminal."""
    lines = tree_lines(tree)
    summary = tree_summary(tree)
    if not use_color():
        text = "\n".join("".join(piece for piece, _ in line) for line in lines)
        sys.stdout.write(f"{text}\n{summary}\n")
        return
    from rich.console import Console
    from rich.text import Text

    out = Console(force_terminal=True)
    out.print(Text("\n").join(Text.assemble(*line) for line in lines), soft_wrap=True)
    out.print(summary, highlight=False)


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
    return "\n".join([head, *_aligned(rows), *drawn, f"manifest: {result.manifest}"])


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


def notes(lines: list[str]) -> None:
    """Announcements (aliases, default model, random weights) on stderr, so stdout stays data."""
    for line in lines:
        print(f"note: {line}", file=sys.stderr)


def result(found: Any, json_out: bool) -> None:
    """A command's result: its notes on stderr, then on stdout its JSON (``--json``) or its summary."""
    notes(found.notes)
    typer.echo(as_json(found.as_dict()) if json_out else found.summary())


def as_json(data: Any) -> str:
    """Valid JSON always: a float that is not finite is null (``store.nonfinite``; notes say which)."""
    return json.dumps(nonfinite.safe(data), indent=2, allow_nan=False)
