"""What the API hands back: the module tree, a capture's plan, a capture's result (dataclasses only)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from ..inputs.spec import InputSpec
from ..model.layers import LayerTarget
from ..model.spec import ModelSpec
from ..model.tree import Inventory, ModuleInfo
from ..store.folder import inputtable
from ..store.folder.saved import SavedTensor
from .options import CaptureOptions


@dataclass
class ModuleTree:
    """Every module of a model, as ``hookdump list-modules`` shows it, and the part of it a view selects."""

    requested: str
    timm_name: str | None  # None for a model from elsewhere (tv:NAME, a module of the caller's)
    inventory: Inventory
    notes: list[str] = field(default_factory=list)
    shown: list[str] | None = None  # what --depth / --filter / --leaves selected; None: every module
    depth: int | None = None
    flat: bool = False  # --filter / --leaves: the matches as a flat list of full paths, not a tree

    @property
    def modules(self) -> list[ModuleInfo]:
        """The selected modules (all of them when no view was asked for), in ``named_modules()`` order."""
        if self.shown is None:
            return self.inventory.modules
        keep = set(self.shown)
        return [info for info in self.inventory.modules if info.name in keep]


@dataclass
class CaptureResult:
    """What a capture wrote, and what the user should be told about it."""

    out: Path | str  # a URL for a capture published to object storage
    manifest: Path  # (a capture published: a local copy of the manifest it published)
    requested: str
    timm_name: str | None
    device: str
    tensors: list[SavedTensor]
    inputs: list[dict[str, Any]]
    notes: list[str]
    seconds: float
    stopped_early: bool = False
    classes: list[int] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    pictures: list[Path] = field(default_factory=list)  # --png: the PNGs drawn beside the tensors


def from_manifest(
    out: Path, data: dict[str, Any], seconds: float, tensors: list[SavedTensor] | None = None
) -> CaptureResult:
    """The result of a capture already in ``out`` (``data``: its manifest): merged from ranks, or finished
    by --resume after its final moves were stopped."""
    return CaptureResult(
        out=out, manifest=out / "manifest.json", requested=data["model"]["requested"],
        timm_name=data["model"]["timm_name"], device=data["device"],
        tensors=tensors if tensors is not None else [_saved(t) for t in data["tensors"]],
        inputs=inputtable.records(out, data["inputs"]), notes=data["notes"], seconds=seconds,
        stopped_early=data["stopped_early"],
        classes=(data.get("grad") or {}).get("classes", []), skipped=data.get("skipped", []),
    )  # fmt: skip


def _saved(entry: dict[str, Any]) -> SavedTensor:
    """A manifest's tensor entry as a record; keys this hookdump does not know (a later one's) left out."""
    known = {f.name for f in fields(SavedTensor)}
    return SavedTensor(**{k: v for k, v in entry.items() if k in known})


@dataclass
class CapturePlan:
    """Everything a capture checks before its first forward, without the real model (``--dry-run``)."""

    tree: ModuleTree
    targets: list[LayerTarget]
    spec: ModelSpec
    options: CaptureOptions
    source: InputSpec | None = None
    paths: list[Path] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    load: Callable[[], tuple[torch.nn.Module, list[str]]] | None = None  # the real model, built once
    sizes: dict[str, int] = field(default_factory=dict)  # bytes per layer, in one format
    total_bytes: int = 0  # peak disk use, every format
    skipped: list[dict[str, str]] = field(default_factory=list)  # --skip-bad: unreadable inputs
    progress: dict[str, Any] | None = None  # --resume: how far the interrupted run got
    shard: dict[str, Any] | None = None  # --shard I/N: which rows of which run
    save_as: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # --attention: attn_drop -> (module, attn)
    channels_last: set[str] = field(default_factory=set)  # layers whose 4-D maps are (N, H, W, C)
    prefix_tokens: int | None = None  # the model's num_prefix_tokens (class, distillation, registers)
    class_token: bool = False  # whether the first of them is a class token (timm's ``cls_token``)
    model_record: dict[str, Any] = field(default_factory=dict)  # the source's keys of the manifest's model
    rerun: str = ""  # the options record's model (a caller's module: its class and state-dict digest)
    journal: list[dict[str, Any]] = field(default_factory=list)  # --resume: the captured inputs' records
    published: str | None = None  # --out a URL: where the capture, written to ``options.out``, goes

    @property
    def modules(self) -> list[ModuleInfo]:
        found = [self.tree.inventory.get(t.path) for t in self.targets]
        return [m for m in found if m is not None]
