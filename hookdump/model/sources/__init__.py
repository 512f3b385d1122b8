"""Where a model comes from, by the prefix of its name: one module (or small package) per source, each with
its ``PREFIX`` and ``source(spec) -> Source`` (``base.py``), registered here and only here. A plain name is
timm's (a timm name, a Twins alias, a plugin's); ``tv:`` torchvision's; ``hf:`` Hugging Face's; ``open_clip:``
OpenCLIP's; a caller's own ``nn.Module`` (the API's ``model=``) is ``module``. The core of the model wing
(``model/*.py``) never imports a source: a new one is a module here and a line in ``SOURCES``."""

from __future__ import annotations

from types import ModuleType

from ..spec import ModelSpec
from . import hf, module, openclip, timm, tv
from .base import Source

__all__ = ["SOURCES", "Source", "resolve"]

#: Each source by the prefix of the names it builds; timm, whose names have none, is tried last.
SOURCES: dict[str, ModuleType] = {
    tv.PREFIX: tv,
    hf.PREFIX: hf,
    openclip.PREFIX: openclip,
    module.PREFIX: module,
    timm.PREFIX: timm,
}


def resolve(spec: ModelSpec) -> Source:
    """The source of ``spec``'s model: a caller's module, else the one its name's prefix names."""
    if spec.module is not None:
        return module.source(spec)
    return next(s for prefix, s in SOURCES.items() if spec.name.startswith(prefix)).source(spec)  # type: ignore[no-any-return]
