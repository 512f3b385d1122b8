"""A capture's ``manifest.json`` read as a ``--config`` file: the options it recorded (nulls dropped), the
folder its relative paths are relative to (its ``cwd``), and a note when another manifest schema wrote it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..store.folder.manifest import SCHEMA_VERSION
from ..version import __version__


def manifest_entries(path: Path, text: str) -> tuple[list[tuple[str | None, str, Any]], Path]:
    """A manifest's recorded options (nulls dropped) and the folder its relative paths are relative to."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}, line {exc.lineno}: invalid JSON: {exc.msg}.") from None
    if not isinstance(data, dict) or not isinstance(data.get("options"), dict):
        raise InputError(
            f'{path} is not a hookdump manifest: it has no "options" object.',
            "Give --config a .toml file, or the manifest.json that `hookdump capture` wrote.",
        )
    if not isinstance(data.get("cwd"), str):
        raise InputError(f'{path}: the manifest has no "cwd" (the folder the capture ran in).')
    base = Path(os.path.abspath(path.parent / os.path.expanduser(data["cwd"])))
    return [("options", k, v) for k, v in data["options"].items() if v is not None], base


def schema_notes(path: Path, data: dict[str, Any]) -> list[str]:
    """A note when a manifest was written by a hookdump of another manifest schema: its options are read
    by the names they have today, which may not mean what they meant then."""
    version = data.get("schema_version", "command" in data and SCHEMA_VERSION)  # --print-config --json
    if version == SCHEMA_VERSION:
        return []
    return [
        f"{path} is a manifest of schema_version {json.dumps(version)}; hookdump {__version__}"
        f" writes {SCHEMA_VERSION}: its options are read by what their names mean today (check them with"
        " --print-config)"
    ]
