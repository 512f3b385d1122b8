"""Layer specs (paths, ``[i]`` indexing, globs, ``re:`` regexes, ``feat:K`` levels, ``@k`` calls) to modules
that fire."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import LayerError, UsageError, closest
from ..patterns import match, normalize
from ..units import first_few
from . import featlevels, opspecs
from .tree import Inventory, ModuleInfo

_CALL = re.compile(r"^(?P<path>.+)@(?P<call>\d+)$")


@dataclass(frozen=True)
class LayerTarget:
    """A concrete module path to hook, which call of it (None: every call) and which of its output tensors
    (None: all; ``feat:K`` of a tuple's element keeps that one)."""

    path: str
    call: int | None = None
    elements: frozenset[int] | None = None


def resolve(
    specs: list[str], inventory: Inventory, model_label: str, notes: list[str] | None = None
) -> list[LayerTarget]:
    """Turn specs into targets, refusing (with the fix) anything whose hook would never fire.

    ``notes`` gets one line per ``feat:K`` level: the module it is, and how its output holds the map.
    """
    if not specs:
        raise UsageError(
            "No layer given.", f"Pass --layer PATH; `hookdump list-modules {model_label}` shows every path."
        )
    targets: dict[str, LayerTarget] = {}
    for spec in specs:
        call_match = _CALL.match(spec.strip())
        body, call = (call_match["path"], int(call_match["call"])) if call_match else (spec, None)
        for path in _resolve_one(body, inventory, model_label, notes):
            calls = inventory.get(path).calls  # type: ignore[union-attr]
            if call is not None and calls is not None and call >= calls:
                raise call_out_of_range(path, call, calls)
            parts = featlevels.elements(body, inventory, model_label) if featlevels.is_spec(body) else {}
            targets[f"{path}@{call}"] = _joined(
                targets.get(f"{path}@{call}"), LayerTarget(path, call, parts.get(path))
            )
    order = {name: i for i, name in enumerate(inventory.in_order)}
    return sorted(targets.values(), key=lambda t: (order[t.path], -1 if t.call is None else t.call))


def _joined(old: LayerTarget | None, new: LayerTarget) -> LayerTarget:
    """One target asked for twice: every output tensor either asks for."""
    if old is None:
        return new
    both = None if old.elements is None or new.elements is None else old.elements | new.elements
    return LayerTarget(new.path, new.call, both)


def call_out_of_range(path: str, call: int, calls: int) -> LayerError:
    """``LAYER@k`` with k at or beyond the number of times the module runs per forward."""
    return LayerError(
        f"`{path}@{call}` asks for call {call}, but {path} runs {calls} time(s) per forward pass.",
        f"Calls are counted from 0: use {path}@0 ... {path}@{calls - 1}."
        if calls > 1
        else f"It runs once: use {path} (or {path}@0).",
    )


def _resolve_one(spec: str, inventory: Inventory, model_label: str, notes: list[str] | None) -> list[str]:
    if opspecs.is_op_spec(spec):
        return opspecs.select(spec, inventory, model_label, notes)
    if featlevels.is_spec(spec):
        return featlevels.select(spec, inventory, model_label, notes)
    matched = match(spec, inventory.names)
    if matched is None:
        path = normalize(spec)
        info = inventory.get(path)
        owner = parameter_owner(path, inventory) if info is None else None
        if owner is not None:  # a state-dict key: its module
            if notes is not None:
                notes.append(f"`{spec}` is a parameter (a state-dict key): hooking its module {owner}")
            path, info = owner, inventory.get(owner)
        if info is None:
            raise unknown_path(spec, path, inventory, model_label)
        _check_fires(info, inventory, model_label)
        return [path]
    firing = [n for n in matched if inventory.get(n).fires is not False]  # type: ignore[union-attr]
    if firing:
        return firing
    listing = f"Run `hookdump list-modules {model_label} --filter '{spec}'` to see what it matches."
    if matched:
        raise LayerError(
            f"Layer pattern `{spec}` matches only modules that never fire (containers or never called)"
            f" in {model_label}: {', '.join(matched[:5])}{', ...' if len(matched) > 5 else ''}.",
            f"Match their children instead (e.g. `{spec}.*`). {listing}",
        )
    probe = re.sub(r"\*+|\?", "0", normalize(spec.removeprefix("re:")))
    near = [n for n in closest(probe, inventory.names) if inventory.get(n).fires]  # type: ignore[union-attr]
    hint = f"Close paths: {', '.join(near)}. " if near else ""
    raise LayerError(f"Layer pattern `{spec}` matches no module of {model_label}.", hint + listing)


def unknown_path(spec: str, path: str, inventory: Inventory, model_label: str) -> LayerError:
    """The error for a path that names no module: a parameter's module, or the closest real paths."""
    listing = f"Run `hookdump list-modules {model_label}` to see every path."
    if not path.strip():
        return LayerError(
            f"The layer path is empty (`{spec}`): it names no module of {model_label} (an unset shell"
            " variable?).",
            f"Give a module path (e.g. --layer {_first_firing_leaf('', inventory) or 'NAME'}). {listing}",
        )
    parent = parameter_owner(path, inventory)
    if parent is not None:
        return LayerError(
            f"`{spec}` is a parameter of {model_label}, not a module: hooks attach to modules.",
            f"Hook its module instead: --layer {parent}",
        )
    near = closest(path, inventory.names)
    hint = f"Did you mean: {', '.join(near)}? {listing}" if near else listing
    return LayerError(f"`{spec}` is not a module of {model_label}.", hint)


#: The last part of a state-dict key that names a parameter or buffer of its module, not a module.
_PARAMETERS = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked", "gamma", "beta"}


def parameter_owner(path: str, inventory: Inventory) -> str | None:
    """The module a state-dict key (``pos_block.1.proj.0.weight``) belongs to; None for other paths."""
    parent, _, leaf = path.rpartition(".")
    return parent if parent and leaf in _PARAMETERS and inventory.get(parent) is not None else None


def _check_fires(info: ModuleInfo, inventory: Inventory, model_label: str) -> None:
    if info.scripted:
        raise LayerError(
            f"`{info.name}` is a TorchScript module ({info.type}): torch takes no hook on one, so nothing of"
            " it can be captured.",
            "Capture the module that calls it, or build the model without torch.jit.script / trace.",
        )
    if info.container:
        children = info.children
        example = _first_firing_leaf(children[-1], inventory) if children else None
        shown = first_few(children, 8)
        hint = f"Hook one of its children instead: {shown}" if children else "It has no children to hook."
        if example:
            hint += f" (e.g. --layer {example})"
        raise LayerError(
            f"`{info.name}` is a {info.type}: containers are never called in forward, so a hook on it"
            " never fires.",
            hint + ".",
        )
    if info.fires is False and info.fused_attention:
        parent = info.name.rpartition(".")[0]
        raise LayerError(
            f"`{info.name}` never runs: `{parent}` uses fused attention (F.scaled_dot_product_attention),"
            " so the attention weights never exist as a tensor.",
            f"Pass --attention with -l {parent}: the unfused path runs and its weights are saved as"
            f" {parent}.attn.",
        )
    if info.fires is False:
        raise LayerError(
            f"`{info.name}` ({info.type}) is never called in the forward pass of {model_label},"
            " so a hook on it never fires.",
            f"`hookdump list-modules {model_label}` marks the modules that never run; hook one that does.",
        )


def in_subtree(name: str, root: str) -> bool:
    """Whether module path ``name`` is ``root`` or sits below it."""
    return name == root or name.startswith(root + ".")


def _first_firing_leaf(name: str, inventory: Inventory) -> str | None:
    """The first module under ``name`` (itself included) that fires and has no children."""
    for info in inventory.modules:
        if (not name or in_subtree(info.name, name)) and not info.children and info.fires and info.name:
            return info.name
    return None


def select(
    found: Inventory, depth: int | None, pattern: str | None, leaves: bool, model_label: str = "MODEL"
) -> list[str] | None:
    """Names a view keeps (None: no view asked for, keep all), in ``named_modules()`` order."""
    if depth is None and pattern is None and not leaves:
        return None
    names = found.names
    if pattern is not None:
        is_level = featlevels.is_spec(pattern)
        matched = featlevels.select(pattern, found, model_label) if is_level else match(pattern, names)
        if matched is None:
            path = normalize(pattern)
            if found.get(path) is None:
                raise unknown_path(pattern, path, found, model_label)
            matched = [n for n in names if in_subtree(n, path)]
        keep = set(matched)
        names = [n for n in names if n in keep]
    if depth is not None:
        names = [n for n in names if n.count(".") < depth]
    if leaves:
        names = [n for n in names if not found.get(n).children]  # type: ignore[union-attr]
    return names
