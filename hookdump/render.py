"""Everything hookdump shows on a terminal: module trees, capture tables, notes, JSON."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

if TYPE_CHECKING:
    from .api import CapturePlan, CaptureResult, ModuleTree
    from .inventory import ModuleInfo

CONTAINER_MARK = "[container: never called, a hook here never fires; hook a child]"
NEVER_MARK = "[never called in forward: a hook here never fires]"


def human_count(n: int) -> str:
    """1234567 -> '1.2M'."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def shape_text(shapes: list[list[int]]) -> str:
    return ", ".join("(" + ", ".join(str(d) for d in s) + ")" for s in shapes)


def module_label(info: ModuleInfo) -> Text:
    """One line of the tree: path, class, params, shapes, calls, and why it never fires."""
    label = Text.assemble((info.name, "bold"), "  ", (info.type, "cyan"))
    if info.params:
        label.append(f"  {human_count(info.params)} params", "green")
    if info.output_shapes:
        label.append(f"  -> {shape_text(info.output_shapes)}", "magenta")
    if info.calls is not None and info.calls > 1:
        label.append(f"  x{info.calls} calls", "yellow")
    if info.container:
        label.append(f"  {CONTAINER_MARK}", "bold yellow")
    elif info.fires is False:
        label.append(f"  {NEVER_MARK}", "bold red")
    return label


def module_tree(tree: ModuleTree) -> Tree:
    """The model as a rich tree whose labels carry the exact paths ``--layer`` takes."""
    inv = tree.inventory
    title = (
        tree.requested if tree.requested == tree.timm_name else f"{tree.requested} (timm {tree.timm_name})"
    )
    root = Tree(Text.assemble((title, "bold"), "  ", (inv.root_type, "cyan")))

    def grow(node: Tree, names: list[str]) -> None:
        for name in names:
            info = inv.get(name)
            if info is not None:
                grow(node.add(module_label(info)), info.children)

    grow(root, inv.top_level)
    return root


def tree_summary(tree: ModuleTree) -> str:
    inv = tree.inventory
    fires = sum(1 for m in inv.modules if m.fires)
    never = sum(1 for m in inv.modules if m.fires is False)
    params = sum(m.params for m in inv.modules)
    traced = f"traced on {inv.traced_on}" if inv.traced_on else "not traced"
    size = "x".join(str(d) for d in inv.input_size)
    return (
        f"{len(inv.modules)} modules, {fires} fire, {never} never fire, "
        f"{human_count(params)} parameters; input {size} ({traced})"
    )


def capture_summary(result: CaptureResult) -> str:
    """Where the files went and their shapes, one aligned line each."""
    rows = [
        (s.file, s.kind if s.index is None else f"{s.kind} {s.index}", str(tuple(s.shape)), s.dtype)
        for s in result.tensors
    ]
    widths = [max([len(r[i]) for r in rows], default=0) for i in range(3)]
    lines = [f"wrote {len(rows)} file(s) to {result.out}/ in {result.seconds:.1f}s on {result.device}:"]
    lines += [f"  {f:<{widths[0]}}  {k:<{widths[1]}}  {sh:<{widths[2]}}  {dt}" for f, k, sh, dt in rows]
    lines.append(f"manifest: {result.manifest}")
    return "\n".join(lines)


def plan(found: CapturePlan) -> str:
    """``--dry-run``: each module that would be hooked, its class, calls and output shapes."""
    rows = [
        (m.name, m.type, f"x{m.calls}" if m.calls and m.calls > 1 else "", shape_text(m.output_shapes))
        for m in found.modules
    ]
    widths = [max([len(r[i]) for r in rows], default=0) for i in range(3)]
    lines = [f"would hook {len(rows)} module(s) of {found.tree.requested}:"]
    lines += [f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows]
    return "\n".join(lines)


def notes(lines: list[str]) -> None:
    """Announcements (aliases, default model, random weights) on stderr, so stdout stays data."""
    for line in lines:
        print(f"note: {line}", file=sys.stderr)


def console() -> Console:
    """stdout; lines are never wrapped when it is a pipe, so grep sees whole paths."""
    import os

    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=10_000 if wide else None)


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2)
