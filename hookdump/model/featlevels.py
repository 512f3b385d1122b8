"""timm's feature levels (``feature_info``) as module paths: ``feat:K``.

``feat:K`` is level K of the model's ``feature_info`` (all the levels it declares), which is what
``timm.create_model(name, features_only=True, out_indices=(K,))`` returns; a plain ``features_only=True``
may leave levels out (ViTs return their last three). timm names each level's module. Most names are
modules whose output *is* the feature (timm hooks them, or runs the model up to them). Some are not (Twins,
CoaT, HRNet, MViTv2, Hiera): those families are mapped in :mod:`hookdump.featrules` from their own code,
and every family the tests cover was checked value for value against timm's features model. A level that
cannot be mapped is refused, never guessed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import nn

from ..errors import LayerError, UsageError
from .featrules import RULES, Found, annotate, by_name
from .tree import PREFIX, FeatureLevel, Inventory

MAX_PREFIX_TOKENS = 16  # class, distillation and register tokens ahead of a ViT's patch tokens


def read(model: Any) -> list[dict[str, Any]] | None:
    """A model's ``feature_info`` as a list of dicts (timm keeps a list, or a ``FeatureInfo``); None when it
    has none, or one without a module name, channels and stride for every level (a plugin's, say)."""
    info = getattr(model, "feature_info", None)
    info = getattr(info, "info", info)
    if not isinstance(info, (list, tuple)) or not all(isinstance(d, dict) for d in info):
        return None
    try:
        found = [
            {**d, "module": str(d["module"]), "num_chs": int(d["num_chs"]), "reduction": int(d["reduction"])}
            for d in info
        ]
    except (KeyError, TypeError, ValueError):
        return None
    if not found or not all(d["reduction"] > 0 for d in found):
        return None
    annotate(model, found)
    return found


def block_levels(model: nn.Module, path: str, channels: int, stride: int) -> list[dict[str, Any]]:
    """Each child of the container at ``path`` (a transformer's blocks) as a level of ``channels`` at
    ``stride``, as timm's ViTs declare their blocks: for a model from elsewhere (``tv:``, ``open_clip:``)."""
    children = model.get_submodule(path).named_children()
    return [{"module": f"{path}.{name}", "num_chs": channels, "reduction": stride} for name, _ in children]


def stage_levels(model: nn.Module, prefix: str = "") -> list[dict[str, Any]]:
    """A ResNet-like model's ``layer1`` ... ``layer4`` (below ``prefix``) as levels at strides 4 to 32, each
    of its last conv's channels; none unless all four are there."""
    owner = model.get_submodule(prefix) if prefix else model
    stages = [
        stage for i in (1, 2, 3, 4) if isinstance(stage := getattr(owner, f"layer{i}", None), nn.Module)
    ]
    if len(stages) != 4:
        return []
    levels = []
    for i, stage in enumerate(stages, start=1):
        convs = [m for m in stage.modules() if isinstance(m, nn.Conv2d)]
        channels = int(convs[-1].out_channels) if convs else 0
        levels.append({"module": f"{prefix}.layer{i}" if prefix else f"layer{i}", "num_chs": channels,
                       "reduction": 2 ** (i + 1)})  # fmt: skip
    return levels


def mark(inventory: Inventory) -> None:
    """Resolve the inventory's feature levels and tag each module with the levels it gives."""
    inventory.levels = levels(inventory)
    for info in inventory.modules:
        info.feature_levels = []
    for level in inventory.levels:
        owner = inventory.get(level.path) if level.path and not level.problem else None
        if owner is not None:
            owner.feature_levels.append(level.index)


def levels(inventory: Inventory) -> list[FeatureLevel]:
    """Every level of ``inventory.feature_info``, each resolved to a module or refused with why."""
    rule = RULES.get(inventory.root_type, by_name)
    found = []
    for index, info in enumerate(inventory.feature_info or []):
        base = FeatureLevel(index, info["module"], info["num_chs"], info["reduction"])
        found.append(_checked(base, info, rule(index, base.name, inventory), inventory))
    return found


def _checked(
    level: FeatureLevel, info: dict[str, Any], found: Found | str, inventory: Inventory
) -> FeatureLevel:
    """The level with its module, layout and any problem (a module that never runs, a shape that is off)."""
    if info.get("hook_type") == "forward_pre":
        return _refused(
            level,
            f"timm takes the *input* of `{level.name}` for it (a forward pre-hook)",
            f"Capture that input: --layer {level.name} --what input.",
        )
    if info.get("problem"):  # a source that knows the level is not any module's output (hf: hidden states)
        return _refused(level, str(info["problem"]), info.get("fix"))
    if isinstance(found, str):
        return _refused(level, found)
    module = inventory.get(found.path)
    if module is None or module.fires is False:
        why = "is not a module" if module is None else "never runs"
        return _refused(level, f"`{found.path}`, where it comes from in {inventory.root_type}, {why}")
    level = replace(level, path=found.path, element=found.element)
    if not module.output_shapes:
        return level  # not traced: nothing to check the shape against
    shapes = module.output_shapes
    element = found.element if found.element is not None else (0 if len(shapes) > 1 else None)
    if element is not None and element >= len(shapes):
        return _refused(level, f"`{found.path}` returns {len(shapes)} tensor(s), not {element + 1}")
    layout = _layout(shapes[element or 0], level.channels, level.reduction, inventory.input_size)
    if layout is None:
        return _refused(
            level,
            f"`{found.path}` returns {tuple(shapes[element or 0])}, which is not a map of {level.channels}"
            f" channels at 1/{level.reduction} of a {'x'.join(map(str, inventory.input_size[1:]))} input",
        )
    return replace(level, element=element, layout=layout[0], prefix_tokens=layout[1], grid=layout[2])


def _refused(level: FeatureLevel, problem: str, fix: str | None = None) -> FeatureLevel:
    return replace(level, path=None, problem=problem, fix=fix)


def _layout(
    shape: list[int], channels: int, reduction: int, input_size: tuple[int, ...]
) -> tuple[str, int, tuple[int, int]] | None:
    """How ``shape`` holds a ``channels`` x (H/reduction) x (W/reduction) map; None when it does not.

    Maps may be a little smaller than H/reduction (unpadded convs: Inception's 147 for 299/2); tokens must
    make the grid exactly, after at most ``MAX_PREFIX_TOKENS`` leading ones.
    """
    height, width = input_size[-2], input_size[-1]
    if len(shape) == 4:
        if shape[1] == channels and _near(shape[2], height, reduction) and _near(shape[3], width, reduction):
            return "NCHW", 0, (shape[2], shape[3])
        if shape[3] == channels and _near(shape[1], height, reduction) and _near(shape[2], width, reduction):
            return "NHWC", 0, (shape[1], shape[2])
    if len(shape) == 3 and shape[2] == channels:
        sides = {height // reduction, -(-height // reduction)}, {width // reduction, -(-width // reduction)}
        for h, w in sorted((h, w) for h in sides[0] for w in sides[1]):
            if 0 <= shape[1] - h * w <= MAX_PREFIX_TOKENS:
                return "NLC", shape[1] - h * w, (h, w)
    return None


def _near(side: int, size: int, reduction: int) -> bool:
    """Whether ``side`` is what ``size`` becomes at ``1/reduction``, give or take unpadded borders: each
    unpadded conv loses a few pixels, a large share of a small map (Inception at 160 px: 3, not 5, at
    1/32)."""
    return size / reduction / 1.5 - 2 <= side <= -(-size // reduction)


# --- feat:K specs ------------------------------------------------------------------------------------


def is_spec(spec: str) -> bool:
    return spec.strip().startswith(PREFIX)


def select(spec: str, inventory: Inventory, model_label: str, notes: list[str] | None = None) -> list[str]:
    """The module paths ``feat:K`` / ``feat:*`` names; errors name the levels the model has."""
    return list(
        dict.fromkeys(level.path for level in _chosen(spec, inventory, model_label, notes) if level.path)
    )


def elements(spec: str, inventory: Inventory, model_label: str) -> dict[str, frozenset[int] | None]:
    """For each module ``spec`` names, which of its output tensors the levels are (None: all of them), so
    that ``feat:-1`` of CoaT writes the one scale it asks for, not the tuple's other three."""
    found: dict[str, frozenset[int] | None] = {}
    for level in _chosen(spec, inventory, model_label, None):
        if level.path is None:
            continue
        have = found.get(level.path, frozenset())
        found[level.path] = None if level.element is None or have is None else have | {level.element}
    return found


def _chosen(spec: str, inventory: Inventory, model_label: str, notes: list[str] | None) -> list[FeatureLevel]:
    """The levels ``feat:K`` / ``feat:*`` names that can be captured (see :func:`select`)."""
    wanted = spec.strip()[len(PREFIX) :].strip()
    found = inventory.levels
    if not found:
        raise LayerError(
            f"`{spec}`: {model_label} has no feature levels: feat:K names the stages a model declares (timm's"
            " `feature_info`, or a torchvision, Hugging Face or OpenCLIP backbone's stages), and it declares"
            " none.",
            f"Pass module paths instead; `hookdump list-modules {model_label}` shows them.",
        )
    if wanted == "*":
        good = [level for level in found if level.problem is None and level.path]
        if not good:
            raise _refusal(spec, found[0], model_label)
        for level in found:
            _note(notes, level, model_label)
        return good
    try:
        index = int(wanted)
    except ValueError:
        raise UsageError(
            f"`{spec}` is not a feature level.", "Use feat:K with K a number (feat:2, feat:-1) or feat:*."
        ) from None
    if not -len(found) <= index < len(found):
        raise LayerError(
            f"`{spec}`: {model_label} has {len(found)} feature levels: {table(found)}.",
            f"Use feat:0 ... feat:{len(found) - 1} (feat:-1 is the last), or feat:* for all of them.",
        )
    level = found[index]
    if level.problem is not None or level.path is None:
        raise _refusal(spec, level, model_label)
    _note(notes, level, model_label)
    return [level]


def table(found: list[FeatureLevel]) -> str:
    """``feat:0 act1 (64 ch, 1/2); feat:1 layer1 (64 ch, 1/4); ...``."""
    return "; ".join(
        f"{level.label} {level.path or level.name + ' (refused)'} ({level.channels} ch, 1/{level.reduction})"
        for level in found
    )


def _refusal(spec: str, level: FeatureLevel, model_label: str) -> LayerError:
    return LayerError(
        f"`{spec}` of {model_label} cannot be captured exactly: {level.problem}.",
        level.fix or f"Pick a module yourself: `hookdump list-modules {model_label}` tags each level feat:K.",
    )


def _note(notes: list[str] | None, level: FeatureLevel, model_label: str) -> None:
    """What ``feat:K`` became (or, under ``feat:*``, why a level was left out), for the run's notes."""
    if notes is None:
        return
    if level.problem is not None:
        notes.append(f"{level.label} of {model_label} skipped: {level.problem}")
    else:
        notes.append(level.summary())
