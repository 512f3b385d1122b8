"""The record of one captured tensor, shared by the hooks that take it and the writer that writes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Key = tuple[str, str, "str | None", int]  # layer, kind ("output" / "input"), index, call


@dataclass
class Captured:
    """One captured tensor (its batches are streamed to disk by ``writer.Writer``)."""

    layer: str
    kind: str  # "output", "input", "grad" (of an output) or "attn" (attention weights, --attention)
    index: str | None
    call: int
    calls_per_forward: int
    modified_in_place: bool = False
    layout: str | None = None  # the axes as saved: NCHW, NHWC, NLC, NC, ... (``layouts.layout``)
    windows: dict[str, Any] | None = None  # layout windows: rows per image, geometry (``layouts.saved``)
    order: int | None = None  # when its hook ran in the first forward, among the captured (backward after)

    @property
    def key(self) -> Key:
        return (self.layer, self.kind, self.index, self.call)

    @property
    def file_stem(self) -> str:
        """The ``.npy`` / ``.pt`` file's name without extension: ``stem``, file-safe (``file_stem``)."""
        return file_stem(self.stem)

    @property
    def stem(self) -> str:
        """The tensor's name, as DESIGN.md's table gives it: its file's name without extension, but for
        the ``:`` of an op value (``file_stem``); the safetensors key."""
        name = self.layer if self.calls_per_forward == 1 else f"{self.layer}@{self.call}"
        if self.kind == "input":
            return f"{name}.in{self.index}"
        if self.kind == "attn":
            return f"{name}.attn"
        name = name if self.index is None else f"{name}.out{self.index}"
        return f"{name}.grad" if self.kind == "grad" else name


def file_stem(name: str) -> str:
    """A tensor name as a file name: the ``:`` of an op value (``blocks.3:add``, ``:flatten``), which Windows
    refuses and macOS tools show as ``/``, becomes ``+`` (``blocks.3+add.npy``); the manifest and every
    reader keep the name with ``:``."""
    return name.replace(":", "+")


def key_from_json(items: list[Any]) -> Key:
    """A key read back from JSON (``progress.json``), where tuples became lists."""
    layer, kind, index, call = items
    return (layer, kind, index, int(call))
