"""``--reduce``: pool each captured map at hook time, into the ``(N, C)`` form linear probes, RSA and
retrieval take: the spatial mean or max of ``(N, C, H, W)`` and of token maps ``(N, L, C)``, or the class
token (the first) of a token map."""

from __future__ import annotations

import torch

from ..errors import UsageError

REDUCTIONS = ("none", "mean", "max", "cls")


def reduced_shape(shape: list[int], how: str, channels_last: bool = False) -> list[int]:
    """The shape a tensor of ``shape`` has once reduced (unchanged when there is nothing to pool).
    ``channels_last``: a 4-D map is ``(N, H, W, C)`` (``layouts.channels_last_paths``)."""
    if how == "none" or len(shape) not in (3, 4):
        return list(shape)
    if how == "cls" and len(shape) != 3:
        return list(shape)
    if len(shape) == 4:
        return [shape[0], shape[3] if channels_last else shape[1]]
    return [shape[0], shape[2]]


def reduce(tensor: torch.Tensor, how: str, channels_last: bool = False, prefix: int = 0) -> torch.Tensor:
    """``tensor`` pooled as ``how`` says (a tensor with no map to pool is returned as it is); the first
    ``prefix`` tokens of a token map (class, distillation, register tokens) are left out of a mean or max,
    as timm's ``global_pool='avg'`` leaves them out."""
    if how == "none" or tensor.dim() not in (3, 4) or not tensor.is_floating_point():
        return tensor
    if how == "cls":
        return tensor[:, 0] if tensor.dim() == 3 else tensor
    if tensor.dim() == 3 and prefix:
        tensor = tensor[:, prefix:]
    dims = ((1, 2) if channels_last else (2, 3)) if tensor.dim() == 4 else (1,)
    return tensor.mean(dim=dims) if how == "mean" else tensor.amax(dim=dims)


def token_layout(model: torch.nn.Module) -> tuple[int, int] | None:
    """(patch tokens, prefix tokens) of a timm model whose token maps start with prefix tokens (ViT, DeiT,
    register models); None for the others. A token map of their sum holds them; of the patches alone
    (the patch embedding's output), none."""
    patches = getattr(getattr(model, "patch_embed", None), "num_patches", None)
    prefix = getattr(model, "num_prefix_tokens", None)
    ok = isinstance(patches, int) and isinstance(prefix, int) and prefix > 0
    return (patches, prefix) if ok else None  # type: ignore[return-value]


def prefix_of(tensor: torch.Tensor, how: str, layout: tuple[int, int] | None) -> int:
    """How many prefix tokens ``reduce`` leaves out of ``tensor`` (0 unless a mean / max of a token map
    whose length is the patches plus the prefix)."""
    if layout is None or how not in ("mean", "max") or tensor.dim() != 3:
        return 0
    return layout[1] if tensor.shape[1] == layout[0] + layout[1] else 0


def check(
    how: str,
    shapes: dict[str, list[list[int]]],
    class_token: bool = True,
    model: str = "this model",
    layout: tuple[int, int] | None = None,
) -> list[str]:
    """Refuse ``cls`` where no tensor is a token map, ``model`` has no class token (what each source
    gives as ``cls_token``) or a token map holds the patches alone (``layout``, as ``token_layout`` gives
    it); notes for tensors that stay as they are."""
    if how not in REDUCTIONS:
        raise UsageError(f"--reduce `{how}` is not one of {', '.join(REDUCTIONS)}.", "Use --reduce mean.")
    if how == "none":
        return []
    kept = [name for name, leaves in shapes.items() if any(reduced_shape(s, how) == s for s in leaves)]
    # Without a class token, tensors that hold any token map (a Swin stage returns its tokens and a map) are
    # refused for that, below, not as holding none.
    tokens = any(len(s) == 3 for leaves in shapes.values() for s in leaves)
    if how == "cls" and len(kept) == len(shapes) and (class_token or not tokens):
        raise UsageError(
            f"--reduce cls takes the first token of (N, L, C) token maps; none of {', '.join(kept)} is one.",
            "Use --reduce mean or max for (N, C, H, W) maps.",
        )
    if how == "cls" and not class_token:
        raise UsageError(
            f"--reduce cls takes the class token, and {model} has none: its first token is a patch or a"
            " register token.",
            "Use --reduce mean (or max) to pool the tokens.",
        )
    patches_only = [
        name
        for name, leaves in shapes.items()
        if layout and any(len(s) == 3 and s[1] == layout[0] for s in leaves)
    ]
    if how == "cls" and patches_only:
        raise UsageError(
            f"--reduce cls takes the class token, and {', '.join(patches_only)} holds the {layout[0]} patch"  # type: ignore[index]
            " tokens alone (the class token joins them later): its first token is a patch.",
            "Capture it with --reduce mean, or ask for a layer after the class token is added (a block).",
        )
    return [
        f"--reduce {how} leaves {name} as it is: it has no (N, C, H, W) or (N, L, C) map" for name in kept
    ]
