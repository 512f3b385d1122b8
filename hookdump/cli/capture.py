"""``hookdump capture``: its options parsed, ``hookdump.api.capture`` (or ``plan`` for ``--dry-run``) called,
the result rendered; registered on the ``hookdump`` app by :func:`register`. No torch import at module
level."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from .. import digest
from ..inputs import fetch
from . import process, shell
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


def register(app: typer.Typer) -> None:
    """Add ``capture`` to ``app``."""
    app.command("capture")(capture_command)


def capture_command(
    ctx: typer.Context,
    images: Annotated[
        list[str] | None, typer.Argument(help="Image files, folders (recursive), globs or @list.txt.")
    ] = None,
    layer: Annotated[
        list[str] | None,
        typer.Option(
            "--layer",
            "-l",
            help="pos_block.3.proj.0, pos_block[3].proj[0], blocks.*.*.attn, re:REGEX, LAYER@k. Repeatable.",
        ),
    ] = None,
    model: ModelOpt = None,
    imports: ImportOpt = None,
    model_arg: ModelArgOpt = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help=".safetensors or .pth weights, loaded strictly.")
    ] = None,
    pretrained: Annotated[
        bool, typer.Option("--pretrained", help="timm's pretrained weights (tv:NAME: torchvision's DEFAULT).")
    ] = False,
    sample: Annotated[bool, typer.Option("--sample", help="Use the photo bundled with hookdump.")] = False,
    random_input: Annotated[bool, typer.Option("--random-input", help="One seeded random input.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of random weights and of --random-input.")] = 0,
    image_key: Annotated[
        str | None,
        typer.Option(
            metavar="EXT", help="Tar shards: the member a sample's image is (default: jpg, jpeg, png, webp)."
        ),
    ] = None,
    image_column: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="Parquet / datasets inputs: the column of images (default: image)."
        ),
    ] = None,
    label_column: Annotated[
        str | None, typer.Option(metavar="NAME", help="Parquet / datasets inputs: the column of labels.")
    ] = None,
    input_size: InputSizeOpt = None,
    out: Annotated[
        str,
        typer.Option("--out", "-o", help="Output folder, or a URL (s3://bucket/acts: published when whole)."),
    ] = "hookdump-out",
    fmt: Annotated[
        str, typer.Option("--format", help="npy, pt, safetensors, zarr; comma-separated.")
    ] = "npy",
    what: Annotated[str, typer.Option(help="output, input or both.")] = "output",
    grad: Annotated[bool, typer.Option("--grad", help="Also save gradients of the outputs.")] = False,
    target: Annotated[int | None, typer.Option(help="Class for --grad (default: top class).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16 (autocast).")] = "float32",
    channels_last: Annotated[
        bool, typer.Option("--channels-last", help="channels_last memory format.")
    ] = False,
    save_dtype: Annotated[
        str, typer.Option(help="float32, float16, bfloat16 (not .npy), or keep (as computed).")
    ] = "float32",
    batch_size: Annotated[int, typer.Option(help="Images per forward pass.")] = 16,
    workers: Annotated[
        int | None, typer.Option(help="Image-decoding processes (0: in process; default: by the machine).")
    ] = None,
    reduce: Annotated[
        str, typer.Option(help="Pool each map at capture time: none, mean, max (over space or tokens), cls.")
    ] = "none",
    shard_size: Annotated[
        str | None,
        typer.Option(help="Safetensors shards of at most this size (2GB, 500MB); default one file."),
    ] = None,
    zarr_chunk: Annotated[
        int | None,
        typer.Option(
            metavar="ROWS", help="Inputs in a chunk of tensors.zarr (--format zarr); default --batch-size."
        ),
    ] = None,
    max_queue_mb: Annotated[
        float | None,
        typer.Option(
            metavar="MB",
            help="Most the writer holds while the next batch runs (0: write each batch first);"
            " default 1/256 of the available memory.",
        ),
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Record unreadable images in the manifest and go on.")
    ] = False,
    early_stop: Annotated[
        bool,
        typer.Option(
            "--early-stop/--no-early-stop", help="Stop the forward once every wanted layer has run."
        ),
    ] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be hooked and exit.")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a capture (or an interrupted one) in --out.")
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the interrupted capture in --out (same options).")
    ] = False,
    shard: Annotated[
        str | None, typer.Option(help="I/N: capture shard I of N of the inputs (whole batches); see merge.")
    ] = None,
    attention: Annotated[
        bool, typer.Option("--attention", help="Unfuse timm attention; save each attention module's weights.")
    ] = False,
    compile_model: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="torch.compile the hooked model (pays from a few thousand photos on a CPU; see the docs).",
        ),
    ] = False,
    png: Annotated[
        bool, typer.Option("--png", help="Draw each tensor's grid (and heat map over the photo) beside it.")
    ] = False,
    storage_option: StorageOpt = None,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    config: ConfigOpt = None,
    print_config: PrintConfigOpt = False,
) -> None:
    """Hook layers, run images through the model in eval mode, write every captured tensor to files."""
    storage = storage_options(storage_option)
    if not (dry_run or print_config):  # hashed for the manifest on the idle core while torch and timm import
        digest.prefetch(checkpoint)
        fetch.prefetch(list(images or ()), storage)  # inputs behind URLs fetched meanwhile too
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from .. import api
    from ..inputs.spec import InputSpec
    from . import progress, render, summaries

    if print_config:
        return shell.print_config(ctx)
    spec = spec_of(model, imports, model_arg, checkpoint=checkpoint, pretrained=pretrained, seed=seed)
    key = image_key.lower().lstrip(".") if image_key else None
    source = InputSpec(
        tuple(images or ()), sample, random_input, seed, size_of(input_size), key, image_column, label_column
    )
    names = set(api.CaptureOptions.__dataclass_fields__) - {"formats"}
    chosen = {k: v for k, v in ctx.params.items() if k in names}
    options = api.CaptureOptions(formats=(fmt,), compile=compile_model, **chosen)
    if int(os.environ.get("RANK", "0")) > 0:  # under torchrun, rank 0 alone speaks
        quiet, json_out = True, False
    with shell.user_output_to_stderr(json_out):
        if dry_run:
            found = api.plan(layer or [], model=spec, images=source, options=options, storage_options=storage)
        else:
            bar = progress.Progress(enabled=not quiet)
            with bar:
                result = api.capture(
                    source, layer or [], model=spec, options=options, on_batch=process.trimmed(bar.update),
                    storage_options=storage,
                )  # fmt: skip
    if dry_run:
        render.notes(found.tree.notes + found.notes)
        typer.echo(render.as_json(summaries.plan_dict(found)) if json_out else summaries.plan(found))
    elif json_out:
        typer.echo(result.manifest.read_text().rstrip())
    elif not quiet:
        render.notes(result.notes)
        typer.echo(summaries.capture_summary(result))
