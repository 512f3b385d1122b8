"""``list-modules`` on a terminal: the module tree line by line (paths as ``--layer`` takes them, classes,
params, shapes, calls, why a module never fires), its one-line summary, and its ``--json``."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..api import ModuleTree
    from ..model.opinfo import OpInfo
    from ..model.tree import ModuleInfo

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
