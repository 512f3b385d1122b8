"""What every command shares at the terminal's edge: one error paragraph on stderr (and, under ``--json``,
one error object on stdout) with its exit code, ``--config`` / ``--print-config``, and stdout kept for data.
No torch import here: ``--help`` stays instant."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import typer
from typer._click.exceptions import (
    BadParameter,
    ClickException,
    MissingParameter,
    NoArgsIsHelpError,
    NoSuchOption,
)
from typer.core import TyperArgument, TyperGroup, TyperOption

from ..errors import EXIT_FAILURE, HookdumpError, InputError, Interrupted, UsageError
from ..failures import from_environment
from . import config, config_print

#: The error object's keys and their version (docs/scripts-and-ci.md: "JSON").
ERROR_SCHEMA_VERSION = 1


class _JsonMode:
    """Whether this invocation asked for JSON (``--json`` on the line, or ``json = true`` in a config), and
    the command it runs (for the hint of a usage error)."""

    on = False
    command = ""


class _Config:
    """The options this invocation's ``--config`` file set and the command line did not: each option's
    flags -> (``file, line N``, key), so that a bad value found later is an error naming the file's line."""

    origins: ClassVar[dict[tuple[str, ...], tuple[str, str]]] = {}
    argv: ClassVar[list[str]] = []


def _from_config(exc: UsageError) -> InputError | None:
    """A usage error about an option whose value came from the config file, as that file's error (exit 4)."""
    for flags, (where, key) in _Config.origins.items():
        if any(a in flags or a.split("=", 1)[0] in flags for a in _Config.argv):
            continue  # given on the command line: that value, not the file's, was refused
        if any(re.search(rf"{re.escape(flag)}(?![\w-])", exc.message) for flag in flags if flag[1] == "-"):
            return InputError(f"{where} (`{key}`): {exc.message}", exc.hint)
    return None


class _Stopped(Exception):
    """Ctrl-C or SIGTERM, carried past click (which would turn every KeyboardInterrupt into exit 130)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code)
        self.code = code
        self.detail = detail


def error_object(message: str, kind: str, exit_code: int, hint: str | None) -> dict[str, Any]:
    """What ``--json`` prints on stdout when a command fails."""
    return {
        "error": message,
        "kind": kind,
        "exit_code": exit_code,
        "hint": hint,
        "schema_version": ERROR_SCHEMA_VERSION,
    }


def fail(message: str, kind: str, exit_code: int, hint: str | None = None) -> NoReturn:
    """The one way a command ends in error: the paragraph on stderr, the object on stdout under --json."""
    paragraph = f"{message}\n{hint}" if hint else message
    typer.echo(f"error: {paragraph}", err=True)
    if _JsonMode.on:
        typer.echo(json.dumps(error_object(message, kind, exit_code, hint), indent=2))
    sys.exit(exit_code)


def _fail_for(exc: BaseException) -> NoReturn:
    if isinstance(exc, _Stopped):
        fail(f"interrupted ({exc.code}): {exc.detail}", "interrupted", exc.code)
    if isinstance(exc, NoArgsIsHelpError):  # the help is already printed
        sys.exit(exc.exit_code)
    if isinstance(exc, ClickException):
        command = " ".join(filter(None, ("hookdump", _JsonMode.command)))
        fail(_usage_message(exc), "usage", exc.exit_code, f"See `{command} --help`.")
    exc = from_environment(exc) or exc
    if isinstance(exc, UsageError):
        exc = _from_config(exc) or exc
    if isinstance(exc, HookdumpError):
        fail(exc.message, exc.kind, exc.exit_code, exc.hint)
    fail(
        f"hookdump failed unexpectedly: {type(exc).__name__}: {exc}",
        "unexpected",
        EXIT_FAILURE,
        "Rerun with HOOKDUMP_DEBUG=1 to see the traceback, and report it with the command you ran.",
    )


def _usage_message(exc: ClickException) -> str:
    """click's and Typer's usage errors in hookdump's words: the option, the value, what it should be."""
    if isinstance(exc, NoSuchOption) and exc.possibilities:
        return f"{exc.message}. Did you mean {' or '.join(sorted(exc.possibilities))}?"
    if not isinstance(exc, BadParameter) or isinstance(exc, MissingParameter) or exc.param is None:
        return exc.format_message()
    param = exc.param
    name = max((o for o in param.opts if o.startswith("--")), key=len, default=param.get_error_hint())
    errors: list[dict[str, Any]] = getattr(exc.__cause__, "errors", list)()
    if not errors:
        return f"{name}: {exc.message}"
    value, kind = errors[0].get("input"), str(errors[0].get("type", ""))
    if kind.endswith(("_parsing", "_from_float", "_type")):
        annotation: Any = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        wants: dict[Any, str] = {int: "an integer", float: "a number", bool: "true or false"}
        want = wants.get(annotation, "valid")
        return f"{name} `{value}` is not {want}."
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is None and high is None:
        return f"{name} `{value}`: {exc.message}"
    if low is not None and high is not None:
        return f"{name} {value} is out of range: use a value from {low} to {high}."
    return (
        f"{name} {value} is out of range: use {low} or more."
        if low is not None
        else (f"{name} {value} is out of range: use {high} or less.")
    )


def _item_type(text: str) -> str:
    """A repeatable option's (or variadic argument's) type in --help as its items' type: ``<str>``, not
    ``<list[str]>``."""
    return text.replace("<list[", "<").replace("]>", ">").lower() if text.startswith("<list[") else text


class _Option(TyperOption):
    __slots__ = ()

    def display_type(self, ctx: Any) -> str:
        return _item_type(super().display_type(ctx))


class _Argument(TyperArgument):
    """In the usage line as click writes it (``FILE...``, ``[IMAGES]...``, ``[MODEL]``), not ``{FILE}...``."""

    __slots__ = ()

    def display_type(self, ctx: Any) -> str:
        return _item_type(super().display_type(ctx))

    def _usage_display_name(self) -> str:
        base = (self.metavar or "").strip("[].")
        dots = "..." if self.nargs != 1 else ""
        return f"{base}{dots}" if self.required else f"[{base}]{dots}"


def _tidy_help(command: Any) -> None:
    """Argument names in capitals with ``...`` when repeated; list types shown as their items' type."""
    for param in getattr(command, "params", []):
        if isinstance(param, TyperArgument):
            base = (param.metavar or param.name or "").strip("[].").upper()
            param.metavar = base + ("..." if param.nargs != 1 else "")
            param.__class__ = _Argument
        elif isinstance(param, TyperOption) and param.multiple:
            param.__class__ = _Option


class Group(TyperGroup):
    """Runs a command and turns whatever stops it into :func:`fail`: hookdump's errors, click's usage errors
    (a bad option value, an unknown option), Ctrl-C / SIGTERM and bugs, all one paragraph and an exit code."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for command in self.commands.values():
            _tidy_help(command)

    def main(self, args: Sequence[str] | None = None, *pos: Any, **kwargs: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        _Config.origins, _Config.argv = {}, argv
        _JsonMode.on = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
        _JsonMode.command = argv[0] if argv and argv[0] in self.commands else ""
        kwargs["standalone_mode"] = False
        # a name the terminal cannot encode (a file name that is not UTF-8) is printed escaped, not a crash
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
                stream.reconfigure(errors="backslashreplace")
        try:
            code = super().main(argv, *pos, **kwargs)
        except Exception as exc:
            if os.environ.get("HOOKDUMP_DEBUG") and not isinstance(exc, ClickException | _Stopped):
                raise
            _fail_for(exc)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # what the run keeps is settled: Interrupted.detail says what
            if isinstance(exc, Interrupted):
                raise _Stopped(exc.exit_code, exc.detail) from None
            raise _Stopped(130, Interrupted(130).detail) from None


def set_json(value: bool) -> bool:
    """``--json`` callback: also on when a config file sets ``json = true``."""
    _JsonMode.on = _JsonMode.on or bool(value)
    return value


def apply_config(ctx: typer.Context, value: Path | None) -> Path | None:
    """``--config`` callback (eager): the file's values become the defaults that command-line flags beat."""
    if value is not None:
        origins: dict[str, tuple[str, str]] = {}
        notes: list[str] = []
        defaults = config.load(value, ctx.command, ctx.info_name or "", origins, notes)
        if not {"-q", "--quiet"} & set(_Config.argv):  # eager: --quiet is not parsed yet
            for note in notes:
                typer.echo(f"note: {note}", err=True)
        ctx.default_map = {**(ctx.default_map or {}), **defaults}
        for param in ctx.command.params:
            if param.name in origins:
                _Config.origins[(*param.opts, *param.secondary_opts)] = origins[param.name]
    return value


def print_config(ctx: typer.Context, **overrides: Any) -> None:
    """``--print-config``: the effective options as a TOML config for this command (JSON with --json)."""
    values = {**ctx.params, **overrides}
    write = config_print.to_json if _JsonMode.on else config_print.to_toml
    typer.echo(write(values, ctx.command, ctx.info_name or "").rstrip())


@contextlib.contextmanager
def user_output_to_stderr(active: bool) -> Iterator[None]:
    """With --json, whatever model or plugin code prints goes to stderr: stdout holds the JSON alone."""
    with contextlib.redirect_stdout(sys.stderr) if active else contextlib.nullcontext():
        yield
