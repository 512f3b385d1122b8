"""The commands that read finished captures: ``diff``, ``compare`` and ``top`` (the analysis wing), parsed
here and registered on the ``hookdump`` app by :func:`register`. No numpy or torch import at module level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import urls
from ..errors import UsageError
from .options import AllowDifferentInputsOpt, JsonOpt, StorageOpt, storage_options


def register(app: typer.Typer) -> None:
    """Add ``diff``, ``compare`` and ``top`` to ``app``."""
    app.command("diff")(diff_command)
    app.command("compare")(compare_command)
    app.command("top")(top_command)


def diff_command(
    a: Annotated[str, typer.Argument(metavar="A", help="A finished capture folder or URL (the reference).")],
    b: Annotated[str, typer.Argument(metavar="B", help="The capture folder (or URL) to check against A.")],
    atol: Annotated[float, typer.Option(help="Absolute tolerance: |a - b| <= atol + rtol * |b|.")] = 1e-8,
    rtol: Annotated[float, typer.Option(help="Relative tolerance (numpy.isclose's defaults).")] = 1e-5,
    maps: Annotated[
        list[str] | None,
        typer.Option(
            "--map", metavar="PATTERN=REPLACEMENT", help="Rename A's tensors (a regex). Repeatable."
        ),
    ] = None,
    only_common: Annotated[
        bool, typer.Option("--only-common", help="Tensors on one side only do not count as a difference.")
    ] = False,
    allow_different_inputs: AllowDifferentInputsOpt = False,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Compare two captures tensor by tensor; exit 1 when any differs (as diff and cmp), naming the first."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..analysis.diff import diff
    from ..store.folder.remoteread import local
    from . import render

    with urls.given(storage_options(storage_option)):
        first, second = local(a), local(b)
    found = diff(
        first, second, atol=atol, rtol=rtol, maps=maps or (), only_common=only_common,
        allow_different_inputs=allow_different_inputs,
    )  # fmt: skip
    render.result(found, json_out)
    if found.differs:
        raise typer.Exit(1)


def compare_command(
    a: Annotated[str, typer.Argument(metavar="A", help="A finished capture folder (or URL).")],
    b: Annotated[
        str | None, typer.Argument(metavar="[B]", help="A second capture of the same inputs (else A again).")
    ] = None,
    layers: Annotated[
        list[str] | None,
        typer.Option("--layers", help="Tensors to compare: names, globs, re:REGEX. Repeatable."),
    ] = None,
    metric: Annotated[str, typer.Option(help="cka (linear CKA) or rsa (RDMs compared).")] = "cka",
    biased: Annotated[bool, typer.Option("--biased", help="CKA from the classic, biased HSIC.")] = False,
    distance: Annotated[str, typer.Option(help="RSA: correlation or euclidean distance.")] = "correlation",
    method: Annotated[str, typer.Option(help="RSA: compare RDMs by spearman or tau-a.")] = "spearman",
    rdm_only: Annotated[bool, typer.Option("--rdm-only", help="Only write the RDMs (.npy).")] = False,
    png: Annotated[bool, typer.Option("--png", help="Draw the matrix as a labelled heat map.")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Folder for the PNG and RDMs (default: A/compare).")
    ] = None,
    allow_different_inputs: AllowDifferentInputsOpt = False,
    reduce: Annotated[
        str, typer.Option(help="Pool each tensor to (N, C) first, as capture's: mean, max, cls or none.")
    ] = "none",
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Layer x layer similarity (CKA or RSA) of one capture, or of two on the same inputs."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..analysis.similarity import compare
    from ..store.folder.remoteread import local
    from . import render

    _writes_locally(a, out, png or metric == "rsa", "--out FOLDER")
    with urls.given(storage_options(storage_option)):
        first, second = local(a), local(b) if b is not None else None
    found = compare(
        first, second, layers=layers, metric=metric, biased=biased, distance=distance, method=method, png=png,
        out=out, rdm_only=rdm_only, allow_different_inputs=allow_different_inputs, reduce=reduce,
    )  # fmt: skip
    render.result(found, json_out)


def top_command(
    out: Annotated[
        str, typer.Argument(metavar="OUT", help="The --out folder (or URL) of a finished capture.")
    ],
    layer: Annotated[str, typer.Option("--layer", "-l", help="The tensor (layer1, blocks.3).")],
    channel: Annotated[int | None, typer.Option(min=0, help="One channel.")] = None,
    channels: Annotated[
        str | None, typer.Option(help="Channels A:B (half-open); default the first 16.")
    ] = None,
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="Inputs per channel.")] = 9,
    by: Annotated[str, typer.Option(help="Rank by the max or the mean of each channel's map.")] = "max",
    sheets: Annotated[
        Path | None, typer.Option("--sheets", help="Folder of the contact sheets (default OUT/top/LAYER).")
    ] = None,
    no_png: Annotated[bool, typer.Option("--no-png", help="Rank only; draw no contact sheet.")] = False,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Each channel's k inputs of largest activation, with a contact sheet of the maps over the photos."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..analysis.top import top
    from ..store.folder.remoteread import local
    from . import render

    _writes_locally(out, sheets, not no_png, "--sheets FOLDER (or --no-png)")
    with urls.given(storage_options(storage_option)):
        folder = local(out)
    found = top(folder, layer, channel=channel, channels=channels, k=k, by=by, sheets=sheets, png=not no_png)
    render.result(found, json_out)


def _writes_locally(source: str, where: Path | None, writes: bool, option: str) -> None:
    """A command that writes beside a capture it reads needs a local place for a capture on a bucket."""
    if writes and where is None and urls.is_url(source):
        raise UsageError(
            f"This command writes beside the capture it reads, and `{source}` is on object storage.",
            f"Give its files a local place: {option}.",
        )
