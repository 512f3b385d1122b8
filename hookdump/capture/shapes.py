"""Each captured tensor keeps one shape, as its file does, whatever the size of its inputs. Inputs of several
sizes (a caller's ``transform=`` at ``batch_size=1``: ``inputs/sizes.py``) are watched batch by batch: a
tensor whose shape follows the input's size, or a model that cannot take one, is refused as that input's
error before anything of its batch is written."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from ..errors import HookdumpError, InputError
from ..failures import from_environment
from ..inputs import sizes
from ..inputs.loader import Batch
from ..store.folder.captured import Captured, Key
from ..store.formats.npystream import NpyStream


class Watch:
    """The inputs' sizes and the tensors' shapes of one run of ``paths``, the first of ``size`` (the data
    config's); ``held``: the streams a resumed run continues, whose shapes are set."""

    def __init__(self, paths: list[Path], size: Sequence[int], held: dict[Key, NpyStream]) -> None:
        self.first, self.size = (paths[0] if paths else None), tuple(size)
        self.shapes = {key: tuple(stream.trailing or ()) for key, stream in held.items()}
        self.seen = sizes.Seen()
        self.current: tuple[Path, sizes.Size] | None = None  # the batch in the forward: its input, its size

    def batch(self, batch: Batch) -> None:
        """The batch about to go through the model."""
        self.current = None
        if batch.tensor is not None and batch.paths:
            self.current = (batch.paths[0], tuple(batch.tensor.shape[1:]))
            self.seen.add(self.current[1], batch.paths)

    def check(self, tensors: dict[Key, torch.Tensor]) -> None:
        """Before a batch's tensors are written: one whose shape changed with the input's size is refused."""
        for key, tensor in tensors.items():
            now = tuple(tensor.shape[1:])
            was = self.shapes.setdefault(key, now)
            if now != was and self.first is not None and self.current and self.current[1] != self.size:
                name = Captured(*key, calls_per_forward=1 + bool(key[3])).stem
                raise sizes.follows_size(self.first, self.size, *self.current, name, was, now)

    @contextlib.contextmanager
    def blaming_sizes(self, model: str) -> Iterator[None]:
        """The model's error on an input of another size than the first's is raised as that input's error."""
        try:
            yield
        except Exception as exc:
            refused = self._failed(exc, model)
            if refused is None:
                raise
            raise refused from exc

    def _failed(self, exc: Exception, model: str) -> InputError | None:
        if isinstance(exc, HookdumpError) or from_environment(exc) is not None or self.first is None:
            return None  # hookdump's own error, the machine's (memory), or no input at all
        if self.current is None or self.current[1] == self.size:
            return None
        return sizes.model_refuses(self.first, self.size, *self.current, model, exc)

    def note(self) -> str | None:
        """The note of a run whose inputs had several sizes."""
        return self.seen.note()
