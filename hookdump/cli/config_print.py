"""``--print-config``: the effective options (command line over config file over defaults) back as a TOML
config file for the command, or as the JSON that ``--config FILE.json`` reads back."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from typer._click import Command

from .config import config_keys, resolve


def effective(values: dict[str, Any], command: Command) -> dict[str, Any]:
    """The effective options (param.name -> value) as config keys -> values.

    Relative paths from the command line are relative to the working folder; they are written absolute so
    the file means the same wherever it is saved. None and empty lists are left out (not set).
    """
    out: dict[str, Any] = {}
    for key, param in config_keys(command).items():
        if key == "storage_option":  # they may hold credentials: never printed
            continue
        value = values.get(param.name)
        if value is None or (isinstance(value, list | tuple) and not value):
            continue
        if isinstance(value, list | tuple):
            value = [str(v) for v in value]
        elif isinstance(value, Path):
            value = str(value)
        out[key] = resolve(key, param, value, Path.cwd())
    return out


def to_toml(values: dict[str, Any], command: Command, command_name: str) -> str:
    """The effective options (param.name -> value) as a TOML config file for ``command_name``."""
    lines = [f"[{command_name.replace('_', '-')}]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in effective(values, command).items()]
    return "\n".join(lines) + "\n"


def to_json(values: dict[str, Any], command: Command, command_name: str) -> str:
    """The effective options as JSON that ``--config FILE.json`` reads back (a manifest's ``options``)."""
    options = effective(values, command)
    return json.dumps({"command": command_name, "cwd": os.getcwd(), "options": options}, indent=2)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "nan" if math.isnan(value) else f"{value:+}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(str(v)) for v in value) + "]"
    escapes = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    out = "".join(
        escapes.get(c, f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in str(value)
    )
    return f'"{out}"'
