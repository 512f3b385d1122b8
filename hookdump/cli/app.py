"""The ``hookdump`` command: parse, call ``hookdump.api``, render. No torch import at module level."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from ..errors import Interrupted, UsageError
from ..version import __version__
from . import after, capture, process, shell
from .options import (
    ConfigOpt,
    ImportOpt,
    InputSizeOpt,
    JsonOpt,
    ModelArgOpt,
    ModelOpt,
    PrintConfigOpt,
    size_of,
    spec_of,
)

app = typer.Typer(
    cls=shell.Group,
    name="hookdump",
    help="See inside timm vision models: list hookable modules, capture layer activations to files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hookdump {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """See inside timm vision models: list hookable modules, capture layer activations to files."""


@app.command("list-modules")
def list_modules(
    ctx: typer.Context,
    model_name: Annotated[
        str | None, typer.Argument(metavar="[MODEL]", help="Model name (or use --model).")
    ] = None,
    model: ModelOpt = None,
    imports: ImportOpt = None,
    model_arg: ModelArgOpt = None,
    input_size: InputSizeOpt = None,
    depth: Annotated[int | None, typer.Option(min=1, help="Show modules at most N levels deep.")] = None,
    pattern: Annotated[
        str | None,
        typer.Option("--filter", help="Only paths a --layer glob or re: regex matches; a path: its subtree."),
    ] = None,
    leaves: Annotated[bool, typer.Option("--leaves", help="Only modules without children.")] = False,
    no_shapes: Annotated[bool, typer.Option("--no-shapes", help="Skip the traced pass.")] = False,
    ops: Annotated[
        bool, typer.Option("--ops", help="Also each module's own ops (PATH:OP: blocks.3:add, :flatten).")
    ] = False,
    json_out: JsonOpt = False,
    config: ConfigOpt = None,
    print_config: PrintConfigOpt = False,
) -> None:
    """Every module as a tree: the path --layer takes, class, params, shapes, calls; never-firing marked."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from .. import api
    from . import render, tree_view

    if model_name and model and model_name != model:
        raise UsageError(
            f"Two models given: `{model_name}` and --model `{model}`.", "Give the model once, either way."
        )
    if print_config:
        return shell.print_config(ctx, model=model_name or model)
    with shell.user_output_to_stderr(json_out):
        tree = api.list_modules(
            spec_of(model_name or model, imports, model_arg), input_size=size_of(input_size),
            shapes=not no_shapes, depth=depth, pattern=pattern, leaves=leaves, ops=ops,
        )  # fmt: skip
    render.notes(tree.notes)
    if json_out:
        typer.echo(render.as_json(tree_view.modules_json(tree)))
    else:
        tree_view.print_tree(tree)


capture.register(app)  # capture: listed after list-modules


@app.command()
def merge(
    shards: Annotated[
        list[Path], typer.Argument(metavar="SHARD_DIR...", help="The --out folders of capture --shard I/N.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder of the joined capture.")],
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a capture already in --out.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Join the folders of capture --shard I/N into the capture one process would have written."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..capture.merge import merge as merge_shards
    from . import summaries

    merged = merge_shards(list(shards), out, overwrite=overwrite)
    if json_out:
        typer.echo(merged.manifest.read_text().rstrip())
    else:
        typer.echo(summaries.merge_summary(merged))


@app.command("stats")
def stats_command(
    out: Annotated[Path, typer.Argument(metavar="OUT", help="The --out folder of a finished capture.")],
    json_out: JsonOpt = False,
) -> None:
    """Every captured tensor's min, max, mean, std, zeros, NaN and Inf (from the manifest, or the files)."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..store.folder.summary import collect, table
    from . import render

    rows, notes = collect(out)
    render.notes(notes)
    typer.echo(render.as_json(rows) if json_out else table(rows))


@app.command()
def report(
    out: Annotated[Path, typer.Argument(metavar="OUT", help="The --out folder of a finished capture.")],
    max_channels: Annotated[
        int, typer.Option(min=1, help="Draw at most the first N channels of each tensor.")
    ] = 64,
    json_out: JsonOpt = False,
) -> None:
    """OUT/index.html: every layer's picture, shape and stats, the inputs and the run's provenance."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..report.build import build
    from . import render

    written = build(out, max_channels=max_channels)
    render.result(written, json_out)


after.register(app)  # diff, compare, top: listed after report, before show


@app.command()
def show(
    files: Annotated[
        list[Path],
        typer.Argument(metavar="FILE...", help=".npy / .pt / .safetensors from capture, or capture folders."),
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
    json_out: JsonOpt = False,
) -> None:
    """Captured tensors as PNGs: labelled channel grids, heat maps or Grad-CAM over the photo (--overlay)."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..pictures import draw
    from . import render, summaries

    shown = draw.show_many(
        files, key=key, output=output, index=draw.parse_index(index), max_channels=max_channels,
        channels=channels, top_k=top_k, scale=scale, grey=grey, photo=overlay, alpha=alpha, gradcam=gradcam,
        rollout=rollout,
    )  # fmt: skip
    render.notes(shown.notes + [n for r in shown.rendered for n in r.notes])
    dicts = [r.as_dict() for r in shown.rendered]
    typer.echo(
        render.as_json(dicts if shown.many else dicts[0]) if json_out else summaries.show_summary(shown)
    )


def _terminated(signum: int, frame: object) -> None:
    raise Interrupted(128 + signum)


def main() -> None:
    """Console-script entry point. SIGTERM (CI time-outs, ``timeout``, ``docker stop``) is handled like
    Ctrl-C: the run unwinds, its scratch files are removed, the exit code is 143. The process settings
    (:mod:`hookdump.cli.process`): malloc keeps freed memory within a batch and gives it back after each,
    OpenMP's idle threads spin less, the exit skips the interpreter's teardown, and a standard stream the
    caller closed reads as /dev/null."""
    process.reopen_closed_streams()
    process.keep_freed_memory()
    process.short_spin()
    signal.signal(signal.SIGTERM, _terminated)
    try:
        app(prog_name="hookdump")
    except SystemExit as exc:
        process.exit_now(exc.code)
