"""Options several commands share, declared once (``Annotated`` types typer reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .. import urls
from . import shell

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="timm model name, a Twins alias (alt_gvt_large, pcpvt_small, ...), tv:NAME (torchvision), or"
        " hf:FOLDER_OR_ID (transformers), or open_clip:ARCH[:TAG] (an OpenCLIP image tower).",
    ),
]
ImportOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--import", help="Module or .py file to import first (registers models with timm). Repeatable."
    ),
]
ModelArgOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--model-arg",
        metavar="KEY=VALUE",
        help="Keyword for timm.create_model (num_classes=10, in_chans=1); a Python literal or a string."
        " Repeatable.",
    ),
]
InputSizeOpt = Annotated[
    str | None, typer.Option("--input-size", help="C,H,W instead of the model's default.")
]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        callback=shell.set_json,
        help="Print one JSON document on stdout (errors too) instead of text.",
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        is_eager=True,
        callback=shell.apply_config,
        help="TOML file (or a capture's manifest.json) whose keys are these options; flags given here win.",
    ),
]
StorageOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        metavar="KEY=VALUE",
        help="An option of the storage behind a URL (anon=true, endpoint_url=URL, profile=NAME); repeatable;"
        " a [storage] table in --config. Never printed, never recorded.",
    ),
]
AllowDifferentInputsOpt = Annotated[
    bool, typer.Option("--allow-different-inputs", help="Compare even when the inputs' sha256 differ.")
]
PrintConfigOpt = Annotated[
    bool, typer.Option("--print-config", help="Print the effective options as a TOML config and exit.")
]


def spec_of(name: str | None, imports: list[str] | None, args: list[str] | None, **weights: Any) -> Any:
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..model.args import parse_model_args
    from ..model.spec import DEFAULT_MODEL, ModelSpec

    return ModelSpec(
        name or DEFAULT_MODEL, tuple(imports or ()), name_given=name is not None,
        model_args=parse_model_args(args or []), **weights,
    )  # fmt: skip


def size_of(text: str | None) -> tuple[int, int, int] | None:
    # for speed: a command loads its modules (torch, numpy) when it runs; --help loads none
    from ..inputs.spec import parse_input_size

    return parse_input_size(text) if text else None


def storage_options(given: list[str] | None) -> dict[str, Any]:
    """``--storage-option KEY=VALUE`` (repeatable) as the storage options of the URLs a command reaches."""
    return dict(urls.parse_option(text) for text in given or [])
