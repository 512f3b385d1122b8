"""Whether a state dict fits the model it is loaded into (strict loading): a readable diff of its keys and
shapes when it does not, with the ``--model-arg`` that would fix it when only the classifier or the first
conv differs."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..errors import InputError


def check_fits(state: dict[str, torch.Tensor], model: nn.Module, path: Path, model_name: str) -> None:
    """A readable diff of keys and shapes when a checkpoint does not fit the model (strict loading)."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [k for k in own if k in state and state[k].shape != own[k].shape]
    if not (missing or unexpected or shapes):
        return
    lines = [f"Checkpoint `{path}` does not fit {model_name}:"]
    for title, keys in (
        ("missing (in the model, not in the file)", missing),
        ("unexpected (in the file, not in the model)", unexpected),
        (
            "shape mismatch",
            [f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}" for k in shapes],
        ),
    ):
        if keys:
            more = f", ... and {len(keys) - 6} more" if len(keys) > 6 else ""
            lines.append(f"  {len(keys)} {title}: {', '.join(keys[:6])}{more}")
    fix = _model_arg_fix(state, model, missing, unexpected, shapes)
    hint = (
        f"The checkpoint was trained with {fix}: pass --model-arg {fix}."
        if fix
        else "Pass the --model the checkpoint was trained as, and the arguments it was built with"
        " (--model-arg KEY=VALUE, e.g. num_classes=10)."
    )
    raise InputError("\n".join(lines), hint)


def _model_arg_fix(
    state: dict[str, torch.Tensor],
    model: nn.Module,
    missing: list[str],
    unexpected: list[str],
    shapes: list[str],
) -> str | None:
    """``num_classes=N`` (or ``in_chans=N``) when only the classifier (or the first conv) differs."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    heads = cfg.get("classifier") or ()
    heads = (heads,) if isinstance(heads, str) else tuple(heads)
    head_keys = {k for k in model.state_dict() if k.rsplit(".", 1)[0] in heads}
    if head_keys and not unexpected and set(missing) | set(shapes) <= head_keys:
        if set(missing) == head_keys:
            return "num_classes=0"
        weights = [k for k in shapes if k.endswith(".weight")]
        if weights and not missing:
            return f"num_classes={state[weights[0]].shape[0]}"
    first = cfg.get("first_conv")
    if isinstance(first, str) and not (missing or unexpected) and shapes == [f"{first}.weight"]:
        return f"in_chans={state[shapes[0]].shape[1]}"
    return None
