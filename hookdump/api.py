"""The Python API: every command as a function that returns dataclasses and never prints; a thin front over
the wings that do the work (``capture``, ``analysis``; ``pictures`` for ``--png``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from . import urls
from .analysis.diff import DiffResult, diff
from .analysis.similarity import Similarity, compare
from .analysis.top import TopResult, top
from .capture import launch, listing, parallel, preflight
from .capture.build import Model, Transform
from .capture.options import CaptureOptions
from .capture.results import CapturePlan, CaptureResult, ModuleTree
from .inputs.spec import InputSpec
from .model.spec import DEFAULT_MODEL, ModelSpec
from .pictures.draw import capture_pictures

__all__ = [
    "CaptureOptions",
    "CapturePlan",
    "CaptureResult",
    "DiffResult",
    "InputSpec",
    "ModelSpec",
    "ModuleTree",
    "Similarity",
    "TopResult",
    "capture",
    "compare",
    "diff",
    "list_modules",
    "plan",
    "top",
]


def list_modules(
    model: Model = DEFAULT_MODEL,
    *,
    input_size: tuple[int, int, int] | None = None,
    shapes: bool = True,
    depth: int | None = None,
    pattern: str | None = None,
    leaves: bool = False,
    transform: Transform | None = None,
    ops: bool = False,
) -> ModuleTree:
    """Build the model once on the meta device and trace one pass: names, classes, calls, shapes.

    Args:
        model: a timm name, Twins alias, ``tv:NAME`` (torchvision), ``ModelSpec``, or an ``nn.Module`` of
            yours: it is traced as a deep copy on the meta device (a real CPU pass on a deep copy where it
            cannot run on meta), never touched itself.
        input_size: ``(C, H, W)`` for the traced pass; default: the model's own (a module of yours: what
            ``transform`` makes of a grey image, or its timm ``pretrained_cfg``).
        shapes: False skips the traced pass (no calls, no shapes).
        depth: keep modules at most this many dotted segments deep.
        pattern: keep the modules this ``--layer``-style glob / ``re:`` regex matches; a plain path keeps
            that module and everything under it.
        leaves: keep only modules without children.
        transform: the eval transform of a module of yours (a PIL image to a ``(C, H, W)`` float tensor).
        ops: also name each module's own ops (``PATH:OP``, ``model/ops.py``) in the traced pass.
    """
    return listing.module_tree(model, transform, input_size, shapes, ops, depth, pattern, leaves)


def plan(
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: Model = DEFAULT_MODEL,
    images: InputSpec | list[str] | tuple[str, ...] | None = None,
    input_size: tuple[int, int, int] | None = None,
    options: CaptureOptions | None = None,
    decode: bool = True,
    transform: Transform | None = None,
    storage_options: dict[str, Any] | None = None,
    **option_values: Any,
) -> CapturePlan:
    """The preflight ``capture`` runs before its first batch, and ``--dry-run`` is: check everything that
    needs no batch and fail where the run would: options, output folder, model name, device, weights
    (names and shapes), inputs, layers (traced on the meta device). The real model is not built, unless
    the model cannot run on meta or its weights are ``--pretrained`` ones (only getting them tells whether
    they can be had; the run reuses what was loaded).

    Args:
        model, transform: as for ``capture``.
        images: as for ``capture``; None checks only the model and the layers.
        input_size: ``(C, H, W)`` when ``images`` is None (else ``InputSpec.input_size``).
        options / option_values: a ``CaptureOptions``, or its fields as keywords (``out=..., batch_size=8``).
        decode: decode every input as the run would (a truncated file is refused here too); ``capture``,
            which decodes them anyway, turns it off.
        storage_options: the options of the storage behind the URLs among the inputs and ``out``
            (``{"anon": True}``, ``{"endpoint_url": ...}``: fsspec's); credentials come from the usual places.
    """
    opts = dataclasses.replace(options or CaptureOptions(), **option_values)
    with urls.given(storage_options):
        return preflight.plan(
            layer_specs, model, images, opts, input_size=input_size, decode=decode, transform=transform
        )


def capture(
    images: InputSpec | list[str] | tuple[str, ...],
    layer_specs: list[str] | tuple[str, ...],
    *,
    model: Model = DEFAULT_MODEL,
    options: CaptureOptions | None = None,
    on_batch: Callable[[int, int, int], None] | None = None,
    transform: Transform | None = None,
    storage_options: dict[str, Any] | None = None,
    **option_values: Any,
) -> CaptureResult:
    """Hook ``layer_specs``, run the images through the model in eval mode, write the tensors to ``out``.

    Args:
        images: paths (files, folders, globs, ``@list.txt``) or an ``InputSpec``.
        layer_specs: paths, ``[i]`` indexing, globs, ``re:`` regexes, ``LAYER@k`` for one call.
        model: a timm name, Twins alias, ``tv:NAME`` (torchvision), ``ModelSpec`` (weights, plugins, seed of
            random weights), or an ``nn.Module`` of yours. A module is never run itself: the capture runs a
            deep copy of it in eval mode (as much memory again as its weights, on its device), so its
            weights, modes, hooks, device and ``requires_grad`` stay as they were, whatever happens; the
            manifest records its class and the sha256 of its state dict.
        transform: the eval transform (a PIL image to a ``(C, H, W)`` float tensor); without it, a module
            of yours needs a timm ``pretrained_cfg`` (input size, mean, std).
        options / option_values: a ``CaptureOptions``, or its fields as keywords (``out=..., grad=True``).
        on_batch: called after each batch reached the disk with (images done, images in all, bytes written).
        storage_options: as for ``plan``; never printed, never in the manifest.
    """
    with urls.given(storage_options):
        return _capture(images, layer_specs, model, options, on_batch, transform, option_values)


def _capture(
    images: InputSpec | list[str] | tuple[str, ...],
    layer_specs: list[str] | tuple[str, ...],
    model: Model,
    options: CaptureOptions | None,
    on_batch: Callable[[int, int, int], None] | None,
    transform: Transform | None,
    option_values: dict[str, Any],
) -> CaptureResult:
    started = launch.begin(options, option_values)
    done = launch.publish_pending(options, option_values)  # --resume of a capture published only in part
    if done is not None:
        return done
    found = plan(
        layer_specs, model=model, images=images, options=options, decode=False, transform=transform,
        **option_values,
    )  # fmt: skip
    result = launch.capture(found, list(layer_specs), started, on_batch)
    if found.options.png and parallel.world()[0] == 0:
        shown = capture_pictures(found.options.folder, result.inputs)  # (never a URL: refused with --png)
        result.pictures, result.notes = [r.path for r in shown.rendered], result.notes + shown.notes
    return result
