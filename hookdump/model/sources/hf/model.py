"""The record of one ``hf:`` model (where it is, its config and class, its weights), shared by the modules
that build it, prepare its images and read its facts; and ``transformers``, imported quietly or refused with
the extra that installs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import extras, hub
from ...spec import ModelSpec

if TYPE_CHECKING:
    from .facts import Facts


def transformers_module() -> Any:
    """``transformers``, quiet (no progress bars, warnings only as errors), or the error naming the extra."""
    transformers = extras.need("transformers", "hf: models", "hf", "transformers", "'transformers>=4.40'")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


@dataclass
class HFModel:
    """One ``hf:`` model: where it is, its config, the class that builds it, and what its weights are."""

    spec: ModelSpec
    where: str = ""  # what follows the prefix
    folder: Path | None = None
    klass: Any = None
    config: Any = None
    weights: str | None = None  # the folder's weight file (None: random init, or a --checkpoint)
    notes: list[str] = field(default_factory=list)
    transform: tuple[dict[str, Any], list[str]] | None = None  # hf_transform's, read once
    _facts: Facts | None = None

    @property
    def offline(self) -> bool:
        """Whether the hub may not be asked (``HF_HUB_OFFLINE=1``, or no connection): the cache answers."""
        from huggingface_hub import constants

        return self.folder is not None or hub.offline_reason() is not None or bool(constants.HF_HUB_OFFLINE)

    @property
    def source(self) -> str:
        return str(self.folder) if self.folder is not None else self.where
