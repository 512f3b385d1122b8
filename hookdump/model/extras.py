"""The optional packages behind some model sources (transformers for ``hf:``, open_clip for
``open_clip:``) and inputs (pyarrow for Parquet and datasets tables), imported where first needed, or refused
with the extra that installs it."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import InputError


def need(module: str, needs: str, extra: str, package: str, pip: str | None = None) -> Any:
    """``import module``, or one error paragraph: ``needs`` (``hf: models``) need ``package``, which
    hookdump's ``extra`` extra installs (``pip install -e '.[extra]'``, or ``pip install PIP``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InputError(
            f"{needs} need the `{package}` package, which is not installed ({exc}).",
            f"Install hookdump's {extra} extra: pip install -e '.[{extra}]'"
            f" (or pip install {pip or package}).",
        ) from exc
