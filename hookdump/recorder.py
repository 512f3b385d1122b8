"""Forward hooks that copy what they see at hook time, per call, per tuple element, per batch."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .errors import LayerError
from .layers import LayerTarget
from .outputs import leaves

Key = tuple[str, str, "str | None", int]  # layer, kind, index, call


@dataclass
class Captured:
    """One captured tensor, batch dimension first, on the CPU."""

    layer: str
    kind: str  # "output" or "input"
    index: str | None
    call: int
    calls_per_forward: int
    tensor: torch.Tensor

    @property
    def stem(self) -> str:
        """The file name without extension, as DESIGN.md's table gives it."""
        name = self.layer if self.calls_per_forward == 1 else f"{self.layer}@{self.call}"
        if self.kind == "input":
            return f"{name}.in{self.index}"
        return name if self.index is None else f"{name}.out{self.index}"


class Recorder:
    """Attach hooks on enter, remove every one on exit, whatever happened in between."""

    def __init__(self, model: nn.Module, targets: list[LayerTarget], what: str = "output") -> None:
        self.model = model
        self.what = what
        self.selected: dict[str, set[int] | None] = {}
        for target in targets:
            calls = self.selected.get(target.path, set())
            self.selected[target.path] = (
                None if target.call is None or calls is None else calls | {target.call}
            )
        self.chunks: dict[Key, list[torch.Tensor]] = {}
        self.other: dict[Key, str] = {}  # non-tensor leaves, as repr
        self.calls: dict[str, int] = dict.fromkeys(self.selected, 0)
        self.calls_per_forward: dict[str, int] = dict.fromkeys(self.selected, 0)
        self._handles: list[RemovableHandle] = []

    def __enter__(self) -> Recorder:
        modules = dict(self.model.named_modules())
        try:
            for path in self.selected:
                module = modules[path]
                if self.what in ("input", "both"):
                    self._handles.append(
                        module.register_forward_pre_hook(self._pre_hook(path), with_kwargs=True)
                    )
                self._handles.append(module.register_forward_hook(self._hook(path)))
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _wanted(self, path: str, call: int) -> bool:
        selected = self.selected[path]
        return selected is None or call in selected

    def _pre_hook(self, path: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            call = self.calls[path]
            if self._wanted(path, call):
                for i, arg in enumerate(args):
                    self._keep((path, "input", str(i), call), arg)
                for name, value in kwargs.items():
                    self._keep((path, "input", name, call), value)

        return hook

    def _hook(self, path: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            call = self.calls[path]
            self.calls[path] += 1
            if self.what in ("output", "both") and self._wanted(path, call):
                for index, leaf in leaves(output):
                    self._keep((path, "output", index, call), leaf)

        return hook

    def _keep(self, key: Key, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            # A copy now: later in-place ops in forward (timm's PosConv does `x += ...`) must not reach it.
            self.chunks.setdefault(key, []).append(value.detach().to("cpu", copy=True))
        elif key[1] == "input" and key[2] is not None and key[2].isdigit():
            for index, leaf in leaves(value, key[2]):
                if isinstance(leaf, torch.Tensor):
                    self._keep((key[0], key[1], index, key[3]), leaf)
                else:
                    self.other[(key[0], key[1], index, key[3])] = repr(leaf)
        else:
            self.other[key] = repr(value)

    def run(self, batch: torch.Tensor, model_label: str) -> None:
        """One forward pass; every selected layer (and call) must fire in it."""
        self.calls = dict.fromkeys(self.selected, 0)
        self.model(batch)
        for path, selected in self.selected.items():
            count = self.calls[path]
            if count == 0:
                raise LayerError(
                    f"`{path}` did not fire during the forward pass of {model_label}.",
                    "The module is part of the model but its forward was not called for this input;"
                    f" `hookdump list-modules {model_label}` shows the modules that run.",
                )
            missing = sorted(c for c in (selected or ()) if c >= count)
            if missing:
                raise LayerError(
                    f"`{path}@{missing[0]}` asks for call {missing[0]}, but {path} ran {count} time(s).",
                    f"Calls are counted from 0: use {path}@0 ... {path}@{count - 1}.",
                )
            self.calls_per_forward[path] = max(self.calls_per_forward[path], count)

    def results(self) -> list[Captured]:
        """Each captured tensor with its batches concatenated along the first dimension."""
        return [
            Captured(
                layer=path,
                kind=kind,
                index=index,
                call=call,
                calls_per_forward=self.calls_per_forward[path],
                tensor=torch.cat(parts) if parts[0].dim() else torch.stack(parts),
            )
            for (path, kind, index, call), parts in self.chunks.items()
        ]
