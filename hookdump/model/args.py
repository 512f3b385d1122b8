"""``--model-arg KEY=VALUE``: keyword arguments for ``timm.create_model``, parsed and written back."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError

#: Model arguments hookdump has an option for.
_OWN_ARGS = {"pretrained": "--pretrained", "checkpoint_path": "--checkpoint"}


def parse_model_args(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["num_classes=10", "global_pool=avg"]`` -> ``{"num_classes": 10, "global_pool": "avg"}``: values
    are Python literals (numbers, True/False/None, tuples, lists) where they parse as one, else strings."""
    args: dict[str, Any] = {}
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise UsageError(
                f"--model-arg `{item}` is not KEY=VALUE.", "Write it like --model-arg num_classes=10."
            )
        if key in _OWN_ARGS:
            raise UsageError(f"--model-arg {key} is set by hookdump.", f"Use {_OWN_ARGS[key]} instead.")
        if key in args:
            raise UsageError(f"--model-arg {key} is given twice.", "Give each argument once.")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = text.strip()
        if not _plain(value):
            raise UsageError(
                f"--model-arg {key}={text}: a {type(value).__name__} cannot be recorded in the manifest.",
                "Use numbers, True/False/None, strings, or tuples and lists of them.",
            )
        args[key] = value
    return args


def format_model_args(args: Mapping[str, Any]) -> list[str]:
    """The inverse of :func:`parse_model_args` (``KEY=repr(value)``), for the manifest and --print-config."""
    return [f"{key}={value!r}" for key, value in args.items()]


def _plain(value: Any) -> bool:
    """What JSON keeps (tuples as lists): numbers, booleans, None, strings, and lists / tuples of them."""
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)
