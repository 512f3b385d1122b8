"""What the end of a capture run makes of the recorder's entries: the layout each saved tensor has, and
the notes about what the hooks saw (a module called twice, an in-place change, no gradient, early stop)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .. import units
from ..model import layouts
from ..store.folder.captured import Captured, Key
from ..store.formats.npystream import NpyStream
from .recorder import Recorder
from .results import CapturePlan


def set_layouts(
    results: list[Captured], files: Mapping[Key, NpyStream], found: CapturePlan, net: torch.nn.Module
) -> None:
    """Each entry's ``layout`` and ``windows``, from its saved shape and the batch-of-one trace."""
    modules = dict(net.named_modules())
    for item in results:
        item.layout, item.windows = layouts.saved(
            item.layer,
            item.kind,
            files[item.key].shape,
            item.layer in found.channels_last,
            _traced_rows(item, found),
            modules,
        )


def capture_notes(recorder: Recorder, results: list[Captured]) -> list[str]:
    notes = [
        f"{path} runs {n} times per forward: one file per call ({path}@0 ... {path}@{n - 1});"
        f" --layer {path}@1 picks one"
        for path, n in recorder.calls_per_forward.items()
        if n > 1 and recorder.selected[path] is None
    ]
    notes += [
        f"{c.stem} ({c.kind}) was changed in place later in the forward pass; hookdump saved it as it was"
        " at hook time (a hook that keeps a reference would have saved the changed values)"
        for c in results
        if c.modified_in_place
    ]
    if recorder.grad:
        with_grad = {(c.layer, c.index, c.call) for c in results if c.kind == "grad"}
        notes += [
            f"no gradient reached {c.stem}: it does not affect the target score"
            for c in results
            if c.kind == "output" and (c.layer, c.index, c.call) not in with_grad
        ]
    if recorder.prefix_left_out:
        names = units.first_few(list(recorder.prefix_left_out))
        notes.append(
            f"--reduce {recorder.reduce} left out the first {max(recorder.prefix_left_out.values())} token(s)"
            f" (class / register tokens) of the token maps of {names}, as timm's global_pool='avg' does;"
            " --reduce cls takes the class token"
        )
    if recorder.stopped_early:
        notes.append("stopped the forward pass once every wanted layer had run (--no-early-stop runs it all)")
    return notes


def _traced_rows(item: Captured, found: CapturePlan) -> int:
    """The first axis of this tensor in the batch-of-one trace: 1 for a tensor of images, the windows per
    image for a windowed one (1 when the trace does not tell)."""
    inventory = found.tree.inventory
    path = item.layer
    if item.kind == "attn":
        path = next((child for child, (owner, _) in found.save_as.items() if owner == item.layer), path)
    info = inventory.get(path)
    if info is None:
        return 1
    shapes = info.input_shapes if item.kind == "input" else info.output_shapes
    firsts = {s[0] for s in shapes if s}
    return firsts.pop() if len(firsts) == 1 else 1
