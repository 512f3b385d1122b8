"""The ``hookdump`` command: parse, call ``hookdump.api``, render. No torch import at module level."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from .. import urls
from ..errors import Interrupted, UsageError
from ..version import __version__
from . import after, capture, process, shell, show
from .options import (
    ConfigOpt,
    ImportOpt,
    InputSizeOpt,
    JsonOpt,
    ModelArgOpt,
    ModelOpt,
    PrintConfigOpt,
    StorageOpt,
    size_of,
    spec_of,
    storage_options,
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
        list[str],
        typer.Argument(metavar="SHARD_DIR...", help="The --out folders (or URLs) of capture --shard I/N."),
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="Output folder (or URL) of the joined capture.")],
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a capture already in --out.")
    ] = False,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Join the folders of capture --shard I/N into the capture one process would have written."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..capture.merge import merge_to
    from . import summaries

    with urls.given(storage_options(storage_option)):
        merged = merge_to(list(shards), out, overwrite=overwrite)
    if json_out:
        typer.echo(merged.manifest.read_text().rstrip())
    else:
        typer.echo(summaries.merge_summary(merged))


@app.command("stats")
def stats_command(
    out: Annotated[
        str, typer.Argument(metavar="OUT", help="The --out folder (or URL) of a finished capture.")
    ],
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Every captured tensor's min, max, mean, std, zeros, NaN and Inf (from the manifest, or the files)."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..store.folder.remoteread import local
    from ..store.folder.summary import collect, table
    from . import render

    with urls.given(storage_options(storage_option)):
        rows, notes = collect(local(out))
    render.notes(notes)
    typer.echo(render.as_json(rows) if json_out else table(rows))


@app.command()
def report(
    out: Annotated[
        str, typer.Argument(metavar="OUT", help="The --out folder (or URL) of a finished capture.")
    ],
    max_channels: Annotated[
        int, typer.Option(min=1, help="Draw at most the first N channels of each tensor.")
    ] = 64,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """OUT/index.html: every layer's picture, shape and stats, the inputs and the run's provenance."""
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..report.build import build
    from ..store.folder.remoteread import local, upload
    from . import render

    with urls.given(storage_options(storage_option)):
        folder = local(out)
        written = build(folder, max_channels=max_channels)
        if urls.is_url(out):  # the page and its pictures go beside the capture, in the bucket
            files = [written.path, *(p for p in written.folder.rglob("*") if p.is_file())]
            upload(folder, out, [p.relative_to(folder).as_posix() for p in files])
    render.result(written, json_out)


after.register(app)  # diff, compare, top: listed after report, before show


show.register(app)  # show: last


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
