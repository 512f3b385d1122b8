"""The real image tower of an ``open_clip:`` model with its weights: seeded random ones, a ``--checkpoint`` (a
CLIP state dict, whose ``visual.`` tensors are taken, or the tower's own), or ``--pretrained`` with a tag
(open_clip's download, or its cache); and the check of a ``--checkpoint`` on the meta tower."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import torch
from torch import nn

from ....errors import InputError
from ...checkpoints import read_checkpoint
from ...statediff import check_fits
from ...weights import build_uninitialised, check_hookable, check_weights
from .build import ImageTower, built, tower
from .facts import facts
from .model import MODEL_KEYS, TOWER, OpenCLIPModel, open_clip_module


def load(found: OpenCLIPModel) -> tuple[nn.Module, list[str]]:
    """The real tower on the CPU with its weights, and what to say about them."""
    spec = found.spec
    if spec.pretrained and spec.checkpoint is None:
        return facts(_pretrained(found)), [f"weights: open_clip's {found.arch}:{found.tag} (image tower)"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        if spec.checkpoint is None:
            model = built(found, lambda: tower(found))
        else:
            model = built(found, lambda: build_uninitialised(lambda: tower(found)))
    check_hookable(model, spec.name)
    if spec.checkpoint is None:
        return facts(model.eval()), [
            f"weights: random init from --seed {spec.seed} (pass --checkpoint PATH, or a tag with"
            " --pretrained, for trained weights)"
        ]
    state, dropped = tower_state(read_checkpoint(spec.checkpoint), model)
    check_fits(state, model, spec.checkpoint, spec.name)
    model.load_state_dict(state, strict=True)
    note = f"weights: {spec.checkpoint} (image tower)"
    if dropped:
        note += f"; {dropped} tensor(s) of the text tower and the rest of the CLIP model were left out"
    return facts(model.eval()), [note]


def tower_state(state: dict[str, torch.Tensor], model: nn.Module) -> tuple[dict[str, torch.Tensor], int]:
    """The image tower's tensors of a checkpoint: a CLIP state dict's ``visual.`` ones (and how many others
    it had), or a state dict of the tower alone, put under ``visual.``."""
    ours = f"{TOWER}."
    if any(k.startswith(ours) for k in state):
        tower = {k: v for k, v in state.items() if k.startswith(ours)}
        return tower, len(state) - len(tower)
    own = {k[len(ours) :] for k in model.state_dict()}
    if own & set(state):
        return {ours + k: v for k, v in state.items()}, 0
    return state, 0


def _pretrained(found: OpenCLIPModel) -> nn.Module:
    """open_clip's model with the tag's weights (downloaded, or from its cache), cut to its image tower."""
    oc = open_clip_module()
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    try:
        with quiet[0], quiet[1], warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger().setLevel(logging.ERROR)
            model = oc.create_model(
                found.arch, pretrained=found.tag, pretrained_text=False, force_quick_gelu=found.quick_gelu,
                **{k: v for k, v in found.spec.model_args.items() if k not in MODEL_KEYS},
            )  # fmt: skip
    except Exception as exc:
        why = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        raise InputError(
            f"Could not get open_clip's pretrained weights {found.arch}:{found.tag} ({why}).",
            "Download them once where there is network (open_clip keeps them in the Hugging Face cache,"
            " ~/.cache/huggingface, which $HF_HOME moves), or pass --checkpoint PATH: a state dict of the"
            " CLIP model (torch.save(model.state_dict(), 'clip.pth')) or of its image tower.",
        ) from exc
    return ImageTower(model.visual).eval()


def checkpoint_fits(found: OpenCLIPModel, meta: nn.Module | None) -> None:
    """``--checkpoint``: a CLIP state dict or the tower's, checked on the meta tower (names and shapes)."""
    spec = found.spec
    check_weights(spec, None, spec.name)
    if spec.checkpoint is not None and meta is not None:
        state, _ = tower_state(read_checkpoint(spec.checkpoint, meta=True), meta)
        check_fits(state, meta, Path(spec.checkpoint), spec.name)
