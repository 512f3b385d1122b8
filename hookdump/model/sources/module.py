"""A caller's own ``nn.Module`` (the API's ``model=``): hookdump traces and captures deep copies of it, never
the module itself, so its weights, modes, hooks, device and ``requires_grad`` stay as they were whatever
happens; its eval transform comes from ``transform=`` or its timm ``pretrained_cfg``; the manifest records
its class and a sha256 of its state dict."""

from __future__ import annotations

import copy
import hashlib
import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ...errors import InputError, UsageError
from ..spec import ModelSpec, ResolvedName
from ..weights import check_hookable
from ..weights import check_weights as check_common
from .base import Source

PREFIX = "module:"

#: What an eval transform needs, as the error names it, and the key of timm's ``pretrained_cfg`` that has it.
NEEDED = {"input size": "input_size", "mean": "mean", "std": "std"}


def class_name(module: nn.Module) -> str:
    """``package.module.Class`` of ``module``."""
    kind = type(module)
    return f"{kind.__module__}.{kind.__qualname__}"


def spec_for(module: nn.Module, transform: Callable[[Any], torch.Tensor] | None = None) -> ModelSpec:
    """The ``ModelSpec`` of a caller's module (checked: an eager module with weights that have values)."""
    name = PREFIX + class_name(module)
    check_hookable(module, name)
    on_meta = [n for n, t in itertools.chain(module.named_parameters(), module.named_buffers()) if t.is_meta]
    if on_meta:
        raise InputError(
            f"`{name}` has weights on the meta device (no values), e.g. {on_meta[0]}: nothing can be"
            " captured.",
            "Build the module on the CPU or a GPU (or load its weights with load_state_dict(...,"
            " assign=True)) before passing it.",
        )
    return ModelSpec(name, module=module, transform=transform)


def check_weights(spec: ModelSpec) -> None:
    """A caller's module brings its own weights: ``checkpoint`` and ``pretrained`` are refused."""
    if spec.checkpoint is not None or spec.pretrained:
        given = "checkpoint" if spec.checkpoint is not None else "pretrained"
        raise UsageError(
            f"`{spec.name}` is a module of yours, with its own weights; {given}= would replace them.",
            "Load the weights into the module first (module.load_state_dict(...)), then pass it.",
        )


def state_digest(module: nn.Module) -> str:
    """sha256 of the module's state dict: each key (sorted), then its tensor's dtype, shape and bytes."""
    digest = hashlib.sha256()
    state = module.state_dict()
    for key in sorted(state):
        tensor = state[key].detach()
        digest.update(f"{key}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        flat = tensor.to("cpu").contiguous().reshape(-1)
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def transform_digest(transform: Callable[[Any], Any] | None) -> str | None:
    """sha256 of what a caller's transform does, so that ``--resume`` refuses another one: its ``repr`` where
    that describes it (torchvision's ``Compose(Resize(size=256, ...), ...)``), else a function's code,
    constants, defaults and closure values; None without a transform, or when nothing stable describes it."""
    if transform is None:
        return None
    text = repr(transform)
    code = getattr(transform, "__code__", None)
    if code is not None:
        cells = [c.cell_contents for c in (getattr(transform, "__closure__", None) or ())]
        text = repr((code.co_code, code.co_consts, code.co_names, transform.__defaults__, cells))
    if re.search(r" at 0x[0-9a-fA-F]+", text):  # an object's address: not the same in another run
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def meta_copy(module: nn.Module) -> nn.Module:
    """A deep copy on the meta device: its parameters and buffers are made on meta (never copied), the rest
    is copied as ``copy.deepcopy`` copies it."""
    memo: dict[int, Any] = {}
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        empty = torch.empty_like(tensor, device="meta")
        is_parameter = isinstance(tensor, nn.Parameter)
        memo[id(tensor)] = nn.Parameter(empty, tensor.requires_grad) if is_parameter else empty
    copied: nn.Module = copy.deepcopy(module, memo)
    return copied


def real_copy(module: nn.Module, name: str) -> nn.Module:
    """A deep copy with the module's weights (as much memory again, on the module's device)."""
    try:
        with torch.no_grad():  # a TorchScript module's parameters are cloned, not made: leaves this way
            copied: nn.Module = copy.deepcopy(module)
    except Exception as exc:
        raise InputError(
            f"`{name}` cannot be copied: copy.deepcopy raised {type(exc).__name__}: {exc}",
            "hookdump runs a copy so that your module stays exactly as it was: keep what cannot be copied"
            " (locks, open files, streams) out of the module's attributes.",
        ) from exc
    return copied


def missing(module: nn.Module, needed: tuple[str, ...]) -> list[str]:
    """What of ``needed`` (``input size``, ``mean``, ``std``) the module's timm ``pretrained_cfg`` lacks."""
    cfg = getattr(module, "pretrained_cfg", None)
    if cfg is not None and not isinstance(cfg, Mapping):
        cfg = getattr(cfg, "__dict__", {})
    cfg = cfg or {}
    return [what for what in needed if not cfg.get(NEEDED[what])]


def require_preprocessing(spec: ModelSpec, needed: tuple[str, ...]) -> None:
    """Refuse a module without ``transform=`` whose ``pretrained_cfg`` lacks what ``needed`` names."""
    assert spec.module is not None
    if spec.transform is not None or not (lacks := missing(spec.module, needed)):
        return
    alone = " (or pass input_size= for the traced pass alone)" if needed == ("input size",) else ""
    raise UsageError(
        f"hookdump cannot tell how to prepare images for `{spec.name}`: no transform= was given, and the"
        f" module has no timm pretrained_cfg with its {', '.join(lacks)}.",
        "Pass transform=, a callable from a PIL image to a (C, H, W) float tensor (e.g. torchvision's"
        " transforms.Compose([Resize(256), CenterCrop(224), ToTensor(), Normalize(mean, std)])), or set"
        " module.pretrained_cfg = {'input_size': (3, 224, 224), 'mean': (...), 'std': (...)} as timm models"
        f" have it{alone}.",
    )


def source(spec: ModelSpec) -> Source:
    """A caller's module (``spec.module``); a ``module:`` name without one (a manifest's, on the command
    line) cannot be built."""
    module = spec.module
    if module is None:
        raise InputError(
            f"Model `{spec.name}` names a Python nn.Module that a capture was made from through the API: the"
            " command line cannot build it.",
            "Pass the module itself: hookdump.api.capture(images, layers, model=module).",
        )
    digest = state_digest(module)
    klass = class_name(module)
    shown = transform_digest(spec.transform)  # --resume refuses another transform

    def preprocess(needed: tuple[str, ...]) -> tuple[dict[str, Any] | None, list[str]]:
        require_preprocessing(spec, needed)
        return None, []

    def weights_fit(meta: nn.Module | None) -> None:
        check_weights(spec)
        check_common(spec, None, spec.name)  # the seed's range, as for every source

    return Source(
        ResolvedName(spec.name, None, []),
        build_meta=lambda: meta_copy(module),
        load=lambda: (real_copy(module, spec.name), [f"weights: the module's own ({klass})"]),
        check_weights=weights_fit,
        preprocess=preprocess,
        record={"source": "module", "class": klass, "state_dict_sha256": digest, "transform_sha256": shown},
        rerun=f"{spec.name}@sha256:{digest[:16]}" + (f"+transform@sha256:{shown[:16]}" if shown else ""),
    )
