"""Where a model comes from, by the prefix of its name: timm (a plain name, a Twins alias, a plugin's),
torchvision (``tv:NAME``), Hugging Face (``hf:ID_OR_FOLDER``), OpenCLIP (``open_clip:ARCH[:TAG]``), or a
caller's own ``nn.Module`` (the API's ``model=``). Each source gives the rest
of hookdump the same things (``Source``), so layer specs, the inventory, the hooks and the store never ask."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ..errors import InputError
from . import build, hf_source, hf_transform, module_source, open_clip_source, torchvision_source
from .build import ModelSpec, ResolvedName


@dataclass
class Source:
    """One model, whatever it comes from.

    Attributes:
        name: the name as requested and its timm name (None outside timm), with notes for the user.
        build_meta: the model on the meta device (raises where it cannot be built there).
        load: the real model with its weights, and what to say about them.
        check_weights: refuse weights that contradict or do not fit, given the meta model (or None).
        preprocess: the eval transform as a data config with a note, or None for timm's data config of
            the model (its ``pretrained_cfg``); takes what it must know (``input size``, ``mean``, ...).
        record: what the manifest's ``model`` says of the source beyond the timm keys.
        rerun: the ``model`` of the manifest's options (``--resume`` checks it).
    """

    name: ResolvedName
    build_meta: Callable[[], nn.Module]
    load: Callable[[], tuple[nn.Module, list[str]]]
    check_weights: Callable[[nn.Module | None], None]
    preprocess: Callable[[tuple[str, ...]], tuple[dict[str, Any] | None, list[str]]]
    record: dict[str, Any] = field(default_factory=dict)
    rerun: str = ""


def resolve(spec: ModelSpec) -> Source:
    """The source of ``spec``'s model: its module, else the prefix of its name (a plain name is timm's)."""
    if spec.module is not None:
        return _module(spec)
    if spec.name.startswith(torchvision_source.PREFIX):
        return _torchvision(spec)
    if spec.name.startswith(hf_source.PREFIX):
        return _hf(spec)
    if spec.name.startswith(module_source.PREFIX):
        raise InputError(
            f"Model `{spec.name}` names a Python nn.Module that a capture was made from through the API: the"
            " command line cannot build it.",
            "Pass the module itself: hookdump.api.capture(images, layers, model=module).",
        )
    if spec.name.startswith(open_clip_source.PREFIX):
        return _open_clip(spec)
    return _timm(spec)


def _none(needed: tuple[str, ...]) -> tuple[dict[str, Any] | None, list[str]]:
    return None, []


def _timm(spec: ModelSpec) -> Source:
    name = build.resolve_name(spec)
    timm_name = name.timm_name
    assert timm_name is not None
    return Source(
        name,
        build_meta=lambda: build.build(timm_name, meta=True, args=spec.model_args),
        load=lambda: build.load(spec, timm_name),
        check_weights=lambda meta: build.check_weights(spec, meta, timm_name),
        preprocess=_none,
        record={"source": "timm"},
        rerun=spec.name,
    )


def _torchvision(spec: ModelSpec) -> Source:
    name = torchvision_source.resolve(spec)
    weights = str(torchvision_source.default_weights(spec)) if spec.pretrained else None
    return Source(
        name,
        build_meta=lambda: torchvision_source.build_meta(spec),
        load=lambda: torchvision_source.load(spec),
        check_weights=lambda meta: build.check_weights(spec, meta, spec.name),
        preprocess=lambda needed: torchvision_source.transform(spec),
        record={"source": "torchvision", "torchvision_name": spec.name[3:], "weights": weights},
        rerun=spec.name,
    )


def _module(spec: ModelSpec) -> Source:
    module = spec.module
    assert module is not None
    digest = module_source.state_digest(module)
    klass = module_source.class_name(module)
    shown = module_source.transform_digest(spec.transform)  # --resume refuses another transform

    def preprocess(needed: tuple[str, ...]) -> tuple[dict[str, Any] | None, list[str]]:
        module_source.require_preprocessing(spec, needed)
        return None, []

    def check_weights(meta: nn.Module | None) -> None:
        module_source.check_weights(spec)
        build.check_weights(spec, None, spec.name)  # the seed's range, as for every source

    return Source(
        ResolvedName(spec.name, None, []),
        build_meta=lambda: module_source.meta_copy(module),
        load=lambda: (module_source.real_copy(module, spec.name), [f"weights: the module's own ({klass})"]),
        check_weights=check_weights,
        preprocess=preprocess,
        record={"source": "module", "class": klass, "state_dict_sha256": digest, "transform_sha256": shown},
        rerun=f"{spec.name}@sha256:{digest[:16]}" + (f"+transform@sha256:{shown[:16]}" if shown else ""),
    )


def _hf(spec: ModelSpec) -> Source:
    found = hf_source.resolve(spec)
    return Source(
        hf_source.name(found),
        build_meta=lambda: hf_source.build_meta(found),
        load=lambda: hf_source.load(found),
        check_weights=lambda meta: hf_source.check_weights(found, meta),
        preprocess=lambda needed: hf_transform.data_config(found),
        record=hf_source.record(found),
        rerun=spec.name,
    )


def _open_clip(spec: ModelSpec) -> Source:
    found = open_clip_source.resolve(spec)
    return Source(
        open_clip_source.name(found),
        build_meta=lambda: open_clip_source.build_meta(found),
        load=lambda: open_clip_source.load(found),
        check_weights=lambda meta: open_clip_source.checkpoint_fits(found, meta),
        preprocess=lambda needed: open_clip_source.data_config(found),
        record=open_clip_source.record(found),
        rerun=spec.name,
    )
