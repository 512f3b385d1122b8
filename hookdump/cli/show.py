"""``hookdump show``: captured tensors (files, capture folders, their URLs) as PNGs, parsed here and drawn by
the pictures wing; registered on the ``hookdump`` app by :func:`register`. No numpy or torch import at module
level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import urls
from ..errors import UsageError
from .options import JsonOpt, StorageOpt, storage_options


def register(app: typer.Typer) -> None:
    """Add ``show`` to ``app``."""
    app.command("show")(show_command)


def show_command(
    files: Annotated[
        list[str],
        typer.Argument(
            metavar="FILE...", help=".npy / .pt / .safetensors from capture, or capture folders (or URLs)."
        ),
    ],
    key: Annotated[
        str | None, typer.Option(help="Tensor name in a .safetensors file or a capture folder (layer1).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="PNG to write, or a folder for several (default: beside FILE)."),
    ] = None,
    index: Annotated[str, typer.Option(help="Which image of the batch, or `all` (one PNG each).")] = "0",
    max_channels: Annotated[int, typer.Option(min=1, help="Draw at most the first N channels.")] = 64,
    channels: Annotated[str | None, typer.Option(help="Draw channels A:B (half-open).")] = None,
    top_k: Annotated[
        int | None, typer.Option(min=1, help="Draw the K channels of largest mean |activation|.")
    ] = None,
    scale: Annotated[str, typer.Option(help="channel (each map on its own) or global (one for all).")] = (
        "channel"
    ),
    grey: Annotated[bool, typer.Option("--grey", help="Grey levels instead of viridis / inferno.")] = False,
    overlay: Annotated[
        Path | None, typer.Option(help="Photo to lay the mean |activation| over, as a heat map.")
    ] = None,
    gradcam: Annotated[
        bool, typer.Option("--gradcam", help="Grad-CAM from the layer's --grad file, over --overlay.")
    ] = False,
    rollout: Annotated[
        bool, typer.Option("--rollout", help="Attention rollout through every .attn tensor given.")
    ] = False,
    alpha: Annotated[float, typer.Option(min=0.0, max=1.0, help="Heat-map weight in the overlay.")] = 0.5,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Captured tensors as PNGs: labelled channel grids, heat maps or Grad-CAM over the photo (--overlay)."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..pictures import draw
    from ..store.folder.remoteread import local
    from . import render, summaries

    remote = [f for f in files if urls.is_url(f)]
    if remote and output is None:
        raise UsageError(
            f"show draws beside the tensor it reads, and `{remote[0]}` is on object storage.",
            "Give the PNGs a local place: --output FOLDER (or FILE.png for one).",
        )
    with urls.given(storage_options(storage_option)):
        paths = [local(f) for f in files]
    shown = draw.show_many(
        paths, key=key, output=output, index=draw.parse_index(index), max_channels=max_channels,
        channels=channels, top_k=top_k, scale=scale, grey=grey, photo=overlay, alpha=alpha, gradcam=gradcam,
        rollout=rollout,
    )  # fmt: skip
    render.notes(shown.notes + [n for r in shown.rendered for n in r.notes])
    dicts = [r.as_dict() for r in shown.rendered]
    typer.echo(
        render.as_json(dicts if shown.many else dicts[0]) if json_out else summaries.show_summary(shown)
    )
