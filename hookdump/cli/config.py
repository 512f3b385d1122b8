"""``--config FILE.toml`` (or a capture's ``manifest.json``, read by :mod:`.config_manifest`) to a click
``default_map``, each value checked against its option (back to TOML: :mod:`.config_print`).

Config keys are the long option names without dashes (``--batch-size`` -> ``batch_size``), positional
arguments by parameter name. Keys sit at the top level or under ``[capture]`` / ``[list-modules]``; the
command's table wins. Relative paths are relative to the file's folder (a manifest's: to its ``cwd``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from typer._click import Command, Parameter
from typer._coercion import TypeDescriptor
from typer.core import TyperArgument, TyperOption

from ..errors import InputError, did_you_mean
from ..urls import is_url, plain
from .config_manifest import manifest_entries, schema_notes

_SKIP_KEYS = {"config", "print_config", "help"}  # options about the config itself, never config keys
_SKIP_NAMES = {"model_name"}  # list-modules' positional MODEL: the config says `model`
_TABLES = {"capture": ("capture",), "list-modules": ("list-modules", "list_modules")}
_KEY_LINE = re.compile(r"""\s*(["']?)([A-Za-z0-9_-]+)\1\s*=""")


def config_keys(command: Command) -> dict[str, Parameter]:
    """Config key -> click parameter, in the command's parameter order."""
    keys: dict[str, Parameter] = {}
    for param in command.params:
        if isinstance(param, TyperOption):
            long = [opt for opt in param.opts if opt.startswith("--")]
            key = long[0][2:].replace("-", "_") if long else param.name
        elif isinstance(param, TyperArgument):
            key = param.name
        else:
            continue
        if key not in _SKIP_KEYS and param.name not in _SKIP_NAMES:
            keys[key] = param
    return keys


def load(
    path: Path,
    command: Command,
    command_name: str,
    origins: dict[str, tuple[str, str]] | None = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """The ``default_map`` (param.name -> value) from a TOML config or a capture's manifest.json;
    ``origins`` (if given) gets param.name -> (``file, line N``, key) for each value set, ``notes`` what
    the user should know about the file (a manifest of another schema)."""
    if path.is_dir() and (path / "manifest.json").is_file():
        path = path / "manifest.json"  # a capture folder stands for its manifest
    text = _read(path)
    keys, table_names = config_keys(command), _TABLES.get(command_name.replace("_", "-"), ())
    if path.suffix.lower() == ".json":
        entries, base = manifest_entries(path, text)
        if notes is not None:
            notes += schema_notes(path, json.loads(text))
    else:
        entries, base = _toml_entries(path, text, table_names), Path(os.path.abspath(path.parent))
    defaults: dict[str, Any] = {}
    for table, key, value in entries:
        where = _where(path, text, table, key)
        param = keys.get(key)
        if param is None:
            if table == "options" and command_name != "capture":
                continue  # a manifest's capture-only keys mean nothing to list-modules
            name = f"`{key}` in [{table}]" if table not in (None, "options") else f"`{key}`"
            hint = did_you_mean(key, list(keys)) or f"Valid keys: {', '.join(keys)}."
            raise InputError(f"{where}: unknown key {name} for hookdump {command_name}.", hint)
        defaults[param.name] = resolve(key, param, _check(where, key, param, value), base)
        if origins is not None and param.name is not None:
            origins[param.name] = (where, key)
    return defaults


def _read(path: Path) -> str:
    if not path.exists():
        raise InputError(f"Config file {path} does not exist.", "Check the path given to --config.")
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a config file.", "Give a .toml file or a manifest.json.")
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"Cannot read config file {path}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text.", "Save the config file as UTF-8.") from None


def _tomllib() -> ModuleType:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli

            return tomli
        except ModuleNotFoundError:
            raise InputError(
                "TOML config files need Python 3.11+ (or the tomli package).",
                "Run hookdump with Python 3.11+, or pip install tomli.",
            ) from None


Entry = tuple[str | None, str, Any]  # (table it came from, key, value)


def _toml_entries(path: Path, text: str, table_names: tuple[str, ...]) -> list[Entry]:
    toml = _tomllib()
    try:
        data: dict[str, Any] = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        found = re.search(r" \(at line (\d+), column (\d+)\)$", str(exc))
        where = f"{path}, line {found[1]}, column {found[2]}" if found else str(path)
        message = str(exc)[: found.start()] if found else str(exc)
        raise InputError(
            f"{where}: invalid TOML: {message}.", "See https://toml.io for the syntax."
        ) from None
    storage = data.pop("storage", None)  # [storage]: the storage options, as --storage-option KEY=VALUE
    if storage is not None and not isinstance(storage, dict):
        raise InputError(f"{path}: `storage` must be a table ([storage]), not {_describe(storage)}.")
    tables = [name for name in _TABLES["capture"] + _TABLES["list-modules"] if name in data]
    own = [name for name in tables if name in table_names]
    if len(own) > 1:
        raise InputError(f"{path}: both [{own[0]}] and [{own[1]}] are there.", f"Keep only [{own[0]}].")
    entries: list[Entry] = [(None, k, v) for k, v in data.items() if k not in tables]
    for name in own:
        if not isinstance(data[name], dict):
            raise InputError(f"{path}: `{name}` must be a table ([{name}]), not {_describe(data[name])}.")
        entries += [(name, k, v) for k, v in data[name].items()]
    if storage:
        given = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in storage.items()]
        entries.append(("storage", "storage_option", given))
    return entries


def _where(path: Path, text: str, table: str | None, key: str) -> str:
    """``file, line N`` where the key is written (best effort), else the file; manifests name the key."""
    if table == "options":
        return f'{path} ("options")'
    current: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            current = stripped.strip("[] \t").strip("\"'")
            continue
        found = _KEY_LINE.match(line)
        if found and found.group(2) == key and current == table:
            return f"{path}, line {number}"
    return str(path)


def _check(where: str, key: str, param: Parameter, value: Any) -> Any:
    """The value, if its type fits the parameter (and is in its range), else an InputError."""
    described = _described(param)
    annotation = described.annotation if described else str
    if param.multiple or param.nargs == -1:
        value = [value] if isinstance(value, str) else value
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        want, example = "a list of strings", '["..."]'
    elif (isinstance(param, TyperOption) and param.is_flag) or annotation is bool:
        ok, want, example = isinstance(value, bool), "true or false", "true"
    elif annotation is int:
        ok, want, example = isinstance(value, int) and not isinstance(value, bool), "an integer", "1"
    elif annotation is float:
        ok, want, example = isinstance(value, int | float) and not isinstance(value, bool), "a number", "0.5"
    else:
        ok, want, example = isinstance(value, str), "a string", '"..."'
    if not ok:
        raise InputError(
            f"{where}: `{key}` must be {want}, not {_describe(value)}.", f"e.g. {key} = {example}"
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = _in_range(where, key, param, value)
    return float(value) if annotation is float else value


def _in_range(where: str, key: str, param: Parameter, value: float) -> float:
    """The number, clamped or checked against the option's min/max as click would."""
    low: float | None = getattr(param, "min", None)
    high: float | None = getattr(param, "max", None)
    described = _described(param)
    below, above = low is not None and value < low, high is not None and value > high
    if described and described.parameter_info.clamp and (below or above):
        return low if below and low is not None else high if high is not None else value
    if below or above:
        span = f"x>={low}" if high is None else f"x<={high}" if low is None else f"{low}<=x<={high}"
        raise InputError(f"{where}: `{key}` = {value} is not in the range {span}.")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    kinds = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    kind = next((name for cls, name in kinds.items() if isinstance(value, cls)), type(value).__name__)
    return f"{kind} ({json.dumps(value)})" if isinstance(value, int | float | str) else kind


def resolve(key: str, param: Parameter, value: Any, base: Path) -> Any:
    """Relative paths in the value made absolute against ``base``; module names and the rest unchanged."""
    if key == "images":
        return [_path(v, base) for v in value]
    if key == "out":  # a folder, or a URL
        return _path(value, base)
    if key == "import":
        return [_path(v, base) if v.endswith(".py") or "/" in v else v for v in value]
    described = _described(param)
    return _path(value, base) if described and described.is_path else value


def _described(param: Parameter) -> TypeDescriptor | None:
    """Typer's description of the parameter's type (annotation, path or not, min/max, clamp)."""
    return param.type_descriptor if isinstance(param, TyperOption | TyperArgument) else None


def _path(text: str, base: Path) -> str:
    """Absolute ``text`` (a path or glob) against ``base``; a leading ``@`` (a list file) is kept."""
    if text.startswith("@"):
        return "@" + _path(text[1:], base)
    if is_url(text):
        return text
    text = os.path.expanduser(plain(text))
    return text if os.path.isabs(text) else os.path.normpath(os.path.join(base, text))
