"""``list-modules``: a model's module tree, built once on the meta device and traced once (names, classes,
calls, shapes, its own ops), and the view asked for (depth, a pattern, the leaves)."""

from __future__ import annotations

from ..errors import UsageError
from ..inputs import transforms
from ..model import inventory, layers, sources
from .build import Model, Transform, model_spec, once
from .results import ModuleTree


def module_tree(
    model: Model, transform: Transform | None, input_size: tuple[int, int, int] | None, shapes: bool,
    ops: bool, depth: int | None, pattern: str | None, leaves: bool,
) -> ModuleTree:  # fmt: skip
    """``api.list_modules`` (its docstring says what each argument does)."""
    if depth is not None and depth < 1:
        raise UsageError(f"--depth {depth} is not positive.", "Use --depth 1 for the top-level modules.")
    spec = model_spec(model, transform)
    source = sources.resolve(spec)
    name = source.name
    build_meta = once(source.build_meta)
    build_real = once(lambda: source.load()[0])
    size = input_size
    if size is None:
        config, _ = transforms.eval_config(
            source.preprocess, spec, build_meta, build_real, None, [], ("input size",)
        )
        size = config["input_size"]
    found = inventory.take(
        build_meta, build_real, size, shapes=shapes, size_given=input_size is not None, ops=ops and shapes
    )
    shown = layers.select(found, depth, pattern, leaves, name.requested)
    flat = pattern is not None or leaves
    ignored = ["--ops is ignored with --no-shapes: ops are found in the traced pass it skips"] * (
        ops and not shapes
    )
    notes = name.notes + found.notes + ignored
    return ModuleTree(name.requested, name.timm_name, found, notes, shown, depth, flat)
