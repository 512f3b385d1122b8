"""What every model source shares about a model's weights: hooks that will run, weight init skipped under a
checkpoint, weight options checked before any work, a checkpoint loaded strictly, random weights said."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ..errors import InputError, UsageError
from .checkpoints import read_checkpoint
from .meta import SkipInit
from .spec import SEED_MAX, ModelSpec
from .statediff import check_fits


def check_hookable(model: object, name: str) -> None:
    """Refuse models whose module hooks would never run (scripted, compiled, exported) or would see only one
    replica's share of each batch ((Distributed)DataParallel)."""
    why = "would be skipped, so nothing would be captured"
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        kind, fix = f"wrapped in {type(model).__name__}", "return the bare module (model.module)"
        why, fix = (
            "would see only one replica's share of each batch",
            f"{fix}: hookdump puts it on --device, and torchrun spreads a capture over GPUs",
        )
    elif isinstance(model, torch.jit.ScriptModule):
        kind, fix = "a TorchScript module", "return the eager nn.Module, before torch.jit.script/trace"
    elif isinstance(model, nn.Module) and hasattr(model, "_orig_mod"):
        kind, fix = "a torch.compile'd module", "return the module before torch.compile (model._orig_mod)"
    elif not isinstance(model, nn.Module):
        kind, fix = f"a {type(model).__name__}, not an nn.Module", "return an eager nn.Module"
    else:
        return
    raise InputError(
        f"Model `{name}` is {kind}: forward hooks on its submodules {why}.", f"Let the model builder {fix}."
    )


def build_uninitialised(make: Callable[[], nn.Module]) -> nn.Module:
    """``make()`` without weight init; normally, from the same random state, if the builder raises (reads
    its init) or a parameter would not be in the state dict (so not overwritten by the checkpoint)."""
    try:
        with torch.random.fork_rng(devices=[]), SkipInit():
            model = make()
        if {k for k, _ in model.named_parameters(remove_duplicate=False)} <= model.state_dict().keys():
            return model
    except Exception:
        pass
    return make()


def check_weights(spec: ModelSpec, meta_model: nn.Module | None, model_name: str) -> None:
    """Before any real work: weight options that contradict, a checkpoint that is missing or does not fit
    (names and shapes only, against the meta model when there is one)."""
    if spec.pretrained and spec.checkpoint is not None:
        raise UsageError("--pretrained and --checkpoint both give weights.", "Pass only one of them.")
    if not 0 <= spec.seed <= SEED_MAX:
        raise UsageError(
            f"--seed {spec.seed} is out of range.", f"Use a seed from 0 to {SEED_MAX} (2**64 - 1)."
        )
    if spec.checkpoint is not None:
        state = read_checkpoint(spec.checkpoint, meta=True)
        if meta_model is not None:
            check_fits(state, meta_model, spec.checkpoint, model_name)


def load_checkpoint(model: nn.Module, path: Path, model_name: str) -> None:
    """Load a checkpoint strictly, with a readable diff of keys and shapes when it does not fit."""
    state = read_checkpoint(path)
    check_fits(state, model, path, model_name)
    model.load_state_dict(state, strict=True)


def random_note(seed: int) -> str:
    """What a run with random weights says of them."""
    return (
        f"weights: random init from --seed {seed} (pass --checkpoint PATH or --pretrained for trained"
        " weights)"
    )
