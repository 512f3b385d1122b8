"""What a model holds, as records: each module (:class:`ModuleInfo`), the whole model
(:class:`Inventory`, made by :mod:`hookdump.model.inventory`), and its timm feature levels
(:class:`FeatureLevel`, resolved by :mod:`hookdump.model.featlevels`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .opinfo import OpInfo

PREFIX = "feat:"  # a feature level as a layer spec: feat:K
CONTAINER_REASON = "container: never called, a hook here never fires; hook a child"
NEVER_REASON = "never called in forward: a hook here never fires"
SCRIPTED_REASON = "TorchScript module: torch takes no hook on one; capture the module that calls it"
FUSED_REASON = "fused attention: never called, the attention weights never exist; --attention makes it run"
ATTN_DROP = "attn_drop"  # where timm's unfused attention passes its softmax weights


@dataclass
class ModuleInfo:
    """What a hook on one module path would see."""

    name: str
    type: str
    params: int
    container: bool
    children: list[str]
    calls: int | None = None
    output_shapes: list[list[int]] = field(default_factory=list)
    input_shapes: list[list[int]] = field(default_factory=list)  # positional tensor inputs, first call
    finished: int | None = None  # when its last call returned, counted in module returns of the traced pass
    fused_attention: bool = False  # attn_drop (or softmax) of an attention module run fused: never runs
    feature_levels: list[int] = field(default_factory=list)  # the timm feature levels (feat:K) it gives
    scripted: bool = False  # a TorchScript module (torch.jit.script or trace): no Python forward

    @property
    def fires(self) -> bool | None:
        """True when a forward hook here runs; None when no pass was traced."""
        if self.container or self.scripted:
            return False
        return None if self.calls is None else self.calls > 0

    @property
    def depth(self) -> int:
        return self.name.count(".") + 1

    @property
    def reason(self) -> str | None:
        """Why a hook here never fires; None when it fires (or when no pass was traced)."""
        if self.container:
            return CONTAINER_REASON
        if self.scripted:
            return SCRIPTED_REASON
        if self.fires is False:
            return FUSED_REASON if self.fused_attention else NEVER_REASON
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "params": self.params,
            "calls": self.calls,
            "fires": self.fires,
            "container": self.container,
            "output_shapes": self.output_shapes,
            "depth": self.depth,
            "children": self.children,
            "reason": self.reason,
            "feature_levels": self.feature_levels,
        }


@dataclass(frozen=True)
class FeatureLevel:
    """Level ``index`` of a model's ``feature_info`` and the module whose output timm returns for it.

    ``layout`` is how that output holds the ``(channels, H, W)`` map: ``NCHW`` as timm returns it for most
    models; ``NHWC`` channels last (Swin's stages: ``features_only`` returns them so too); ``NLC`` tokens,
    ``prefix_tokens`` (class, ...) first, which ``features_only`` drops and reshapes to ``(N, C, H, W)``.
    None when no pass was traced (``--no-shapes``).
    """

    index: int
    name: str  # what feature_info calls the module
    channels: int
    reduction: int
    path: str | None = None  # the module to hook; None when refused
    element: int | None = None  # timm's tensor is output ``element`` of a tuple / list (file ``.out<i>``)
    layout: str | None = None
    prefix_tokens: int = 0
    grid: tuple[int, int] | None = None  # (H, W) of the map, once traced
    problem: str | None = None  # why it cannot be captured exactly
    fix: str | None = None

    @property
    def label(self) -> str:
        return f"{PREFIX}{self.index}"

    def summary(self) -> str:
        """``feat:2 = layer2 (128 channels, 1/8 of the input)`` and, for channels last or tokens, how to
        turn the module's output into timm's map."""
        where = (
            self.path if self.element is None else f"{self.path} output {self.element} (.out{self.element})"
        )
        text = f"{self.label} = {where} ({self.channels} channels, 1/{self.reduction} of the input)"
        if self.grid is None or self.layout == "NCHW":
            return text
        (h, w), c = self.grid, self.channels
        if self.layout == "NHWC":
            return f"{text}: channels last, (N, {h}, {w}, {c})"
        drop = f"drop the first {self.prefix_tokens} token(s), " if self.prefix_tokens else ""
        return (
            f"{text}: tokens (N, {self.prefix_tokens + h * w}, {c}); {drop}reshape to (N, {h}, {w}, {c})"
            f" and permute for timm's (N, {c}, {h}, {w})"
        )


@dataclass
class Inventory:
    """Every module of a model except the root, in ``named_modules()`` order."""

    root_type: str
    modules: list[ModuleInfo]
    input_size: tuple[int, ...]
    traced_on: str | None  # "meta", "cpu", "cuda", or None when no pass was run
    notes: list[str] = field(default_factory=list)
    feature_info: list[dict[str, Any]] | None = None  # the model's own, as timm declares it
    levels: list[FeatureLevel] = field(default_factory=list)  # feature_info resolved (featlevels)
    returns: list[list[int]] | None = None  # the shapes of what the model itself returns (traced), batch 1
    returns_plain: bool = True  # ... a tensor, not a tuple or dict of them
    ops: dict[str, list[OpInfo]] | None = None  # each module's own ops (``""``: the root's), when asked for

    def __post_init__(self) -> None:
        self._by_name = {m.name: m for m in self.modules}

    def get(self, name: str) -> ModuleInfo | None:
        """The module ``name``, or the op value ``PATH:OP`` (when ops were found) as what a hook on it sees:
        its shapes, and its module's calls."""
        found = self._by_name.get(name)
        if found is not None or ":" not in name or not self.ops:
            return found
        op = self.op(name)
        if op is None:
            return None
        module = self._by_name.get(op.module)
        return ModuleInfo(
            name, f"op {op.func}", 0, False, [],
            calls=module.calls if module is not None else 1, output_shapes=op.shapes,
            finished=module.finished if module is not None else None,
        )  # fmt: skip

    def op(self, name: str) -> OpInfo | None:
        """The op ``PATH:OP`` names (None when no pass named ops, or it names none)."""
        if ":" not in name:
            return None
        path, _, label = name.rpartition(":")
        return next((op for op in (self.ops or {}).get(path, []) if op.op == label), None)

    @property
    def op_names(self) -> list[str]:
        """Every op value's name, the root's first, then each module's in ``named_modules()`` order."""
        ops = self.ops or {}
        return [op.name for path in ["", *self.names] for op in ops.get(path, [])]

    @property
    def in_order(self) -> list[str]:
        """Every module and op value a layer spec can name: the root's ops, then each module followed by
        its own ops (the order of a capture's files)."""
        ops = self.ops or {}
        return [
            name
            for path in ["", *self.names]
            for name in ([path] * bool(path) + [o.name for o in ops.get(path, [])])
        ]

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.modules]

    @property
    def top_level(self) -> list[str]:
        return [m.name for m in self.modules if "." not in m.name]


def is_container(module: nn.Module) -> bool:
    """A module without its own ``forward`` (ModuleList, ModuleDict, ...) is never called. (A TorchScript
    module's class has no ``forward`` to look at: its compiled one is called.)"""
    if isinstance(module, torch.jit.ScriptModule):
        return False
    return type(module).forward is nn.Module.forward
