"""``PATH:OP`` layer specs: values a module computes in its own forward (``model/ops.py``), picked by name
(``blocks.3:add_1``, ``:flatten`` for the root's own), by glob (``blocks.*:add_1``) or by a ``re:`` over op
names, resolved against the ops of the traced pass; errors list the ops the module runs."""

from __future__ import annotations

import re

from ..errors import LayerError, closest
from ..patterns import match, normalize
from ..units import first_few
from . import featlevels
from .tree import Inventory


def is_op_spec(spec: str) -> bool:
    """Whether a layer spec names op values: a ``:`` that is not ``feat:``'s, nor part of a regex's
    ``(?:...)`` group."""
    body = spec.strip()
    if featlevels.is_spec(body):
        return False
    if body.startswith("re:"):
        return ":" in re.sub(r"\(\?.", "", body[3:])
    return ":" in body


def select(spec: str, inventory: Inventory, model_label: str, notes: list[str] | None = None) -> list[str]:
    """The op names (``PATH:OP``) ``spec`` picks, in ``Inventory.op_names`` order; a pattern leaves out the
    values whose first axis is not the batch (``check_batch_first``), with a note, unless it picks only
    those."""
    names = inventory.op_names
    matched = match(spec, names)
    if matched:
        kept = [n for n in matched if inventory.op(n).batch_axis == 0]  # type: ignore[union-attr]
        if not kept:
            check_batch_first(matched[:1], inventory, model_label)
        left = [n for n in matched if n not in kept]
        if left and notes is not None:
            notes.append(
                f"`{spec}` leaves out {len(left)} op value(s) whose first axis is not the batch:"
                f" {first_few(left)}"
            )
        return kept
    listing = f"`hookdump list-modules {model_label} --ops` lists each module's ops."
    if matched is not None:
        probe = re.sub(r"\*+|\?|\[[^]]*\]", "0", normalize(spec.removeprefix("re:")))
        hint = f"Close names: {', '.join(near)}. " if (near := closest(probe, names)) else ""
        raise LayerError(f"Op pattern `{spec}` matches no op value of {model_label}.", hint + listing)
    path, _, op = normalize(spec).rpartition(":")
    if inventory.op(f"{path}:{op}") is not None:
        return [f"{path}:{op}"]
    info = inventory.get(path) if path else None
    if path and info is None:
        near = closest(path, inventory.names)
        raise LayerError(
            f"`{spec}`: `{path}` is not a module of {model_label}.",
            (f"Did you mean: {', '.join(near)}? " if near else "") + listing,
        )
    where = f"`{path}`" if path else f"{model_label}'s own forward (`:OP`)"
    if info is not None and info.scripted:
        raise LayerError(
            f"`{spec}`: `{path}` is a TorchScript module (scripted or traced): its forward runs as"
            " TorchScript, where no torch function is seen from Python, so its ops have no names.",
            f"Capture the module's output (-l {path}), or load the model without torch.jit.",
        )
    own = [o.op for o in (inventory.ops or {}).get(path, [])]
    if info is not None and info.container:
        raise LayerError(
            f"`{spec}`: `{path}` is a {info.type}: containers are never called, so it runs no op.",
            f"Ask for an op of one of its children ({first_few(info.children)}). {listing}",
        )
    if not own:
        raise LayerError(
            f"`{spec}`: {where} runs no op of its own (its children do the work).",
            f"Capture the module (-l {path or 'PATH'}) or one of its children's ops. {listing}",
        )
    near = closest(op, own)
    hint = f"Did you mean: {', '.join(f'{path}:{n}' for n in near)}? " if near else ""
    raise LayerError(
        f"`{spec}`: {where} runs no op `{op}` in its own forward; it runs {len(own)}: {first_few(own, 8)}.",
        f"{hint}{listing}",
    )


#: Modules with a fused fast path in eval mode that torch turns off while a torch function mode is active.
FAST_PATHS = ("MultiheadAttention", "TransformerEncoderLayer")


def check_batch_first(names: list[str], inventory: Inventory, model_label: str) -> None:
    """Refuse op values whose first axis is not the batch (``OpInfo.batch_axis``): hookdump's files are
    batch first, and such a tensor's batches would be joined on the wrong axis."""
    listing = f"`hookdump list-modules {model_label} --ops` shows the ops and their shapes"
    for name in names:
        op = inventory.op(name)
        if op is None or op.batch_axis == 0:
            continue
        shape = f"({', '.join(map(str, op.shapes[0]))})" if op.shapes else "()"
        if op.batch_axis == -1:
            why = "ran in the traced pass only, not in a second one (the forward caches it), so no axis of it"
            why += " can be told to be the batch"
        elif op.batch_axis is None:
            why = "is the same for every input: no axis of it grows with the batch"
        else:
            why = f"has its batch on axis {op.batch_axis}"
        raise LayerError(
            f"`{name}` {shape} for one input {why}, and hookdump saves tensors batch first, one row per"
            " input.",
            f"Capture an op where the batch is the first axis, or the module's output: {listing}.",
        )


def fast_path_notes(names: list[str], inventory: Inventory) -> list[str]:
    """A note for each module with a fast path (``FAST_PATHS``) that runs while an op value's module is
    watched: it takes its regular path then, so its values differ from a plain run's by rounding."""
    notes = []
    for name in names:
        op = inventory.op(name)
        if op is None:
            continue
        inside = [op.module, *op.callees]
        slow = [p for p in inside if (info := inventory.get(p)) is not None and info.type in FAST_PATHS]
        if slow:
            kinds = ", ".join(sorted({inventory.get(p).type for p in slow}))  # type: ignore[union-attr]
            notes.append(
                f"{first_few(slow)} ({kinds}) run their regular path, not their fused fast path, while the"
                f" ops of {op.module or 'the model'} are watched (torch turns it off under a torch function"
                " mode): values there may differ from a plain run's by float rounding"
            )
    return list(dict.fromkeys(notes))


def channels_last(names: list[str], inventory: Inventory, owners_last: set[str]) -> set[str]:
    """The op values whose 4-D maps are ``(N, H, W, C)``: of the shape of their module's input or output
    and that module's layout (``owners_last``: the modules whose maps are channels last), or of one of
    those shapes with its channels moved last (a ConvNeXt norm's ``permute``, then its ``layer_norm``)."""
    found = set()
    for name in names:
        op = inventory.op(name)
        module = inventory.get(op.module) if op is not None and op.module else None
        if op is None or module is None or len(op.shapes) != 1 or len(op.shapes[0]) != 4:
            continue
        shape, own = op.shapes[0], module.input_shapes + module.output_shapes
        moved = [[s[0], s[2], s[3], s[1]] for s in own if len(s) == 4]  # (N, C, H, W) -> (N, H, W, C)
        last = op.module in owners_last
        if (shape in own and last) or (shape in moved and shape not in own and not last):
            found.add(name)
    return found
