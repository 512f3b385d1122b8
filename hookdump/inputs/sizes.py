"""Inputs of more than one size, which only a caller's ``transform=`` makes (every other eval transform ends
with a fixed crop): a batch of them cannot be stacked, and with ``batch_size=1``, where each runs alone, a
tensor whose shape follows the input's size, or a model that cannot take a size, is the input's error, not
the layer's or the model's. Each error and note names which inputs had which size."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError

Size = tuple[int, ...]

ONE_SIZE = (
    "The transform must give every image one size: end it with one (e.g. Resize(256) then CenterCrop(224))"
)


class Seen:
    """The sizes inputs had, in order of first sight: for each, the first few inputs and how many."""

    SHOWN = 3

    def __init__(self) -> None:
        self.sizes: dict[Size, tuple[list[str], int]] = {}

    def add(self, size: Size, paths: list[Path]) -> None:
        names, count = self.sizes.get(size, ([], 0))
        self.sizes[size] = (
            names + [f"`{p}`" for p in paths[: max(0, self.SHOWN - len(names))]],
            count + len(paths),
        )

    def listing(self) -> str:
        """```a.jpg`, `b.jpg`: (3, 224, 224); `c.png`: (3, 240, 320)``."""
        parts = []
        for size, (names, count) in self.sizes.items():
            shown = ", ".join(names[: self.SHOWN]) + (
                f" and {count - self.SHOWN} more" if count > self.SHOWN else ""
            )
            parts.append(f"{shown}: {size}")
        return "; ".join(parts)

    def note(self, planned: bool = False) -> str | None:
        """What a run (``planned``: a dry run) of inputs of several sizes at ``batch_size=1`` says."""
        if len(self.sizes) < 2:
            return None
        said = (
            f"transform= {'makes' if planned else 'made'} inputs of {len(self.sizes)} sizes, each run alone"
        )
        later = "; the run refuses a tensor whose shape follows the input's size" if planned else ""
        return f"{said} (batch_size=1): {self.listing()}{later}"


def unstackable(paths: list[Path], size: Size, batch: list[tuple[int, Size]], batch_size: int) -> InputError:
    """A batch (``batch``: each input's index in ``paths`` and size) of other sizes than the first input's
    (``size``), named with the first input."""
    seen = Seen()
    if all(i != 0 for i, _ in batch):
        seen.add(size, paths[:1])
    for i, shape in sorted(batch):
        seen.add(shape, [paths[i]])
    return InputError(
        f"transform= made inputs of more than one size: {seen.listing()}; a batch (batch_size={batch_size})"
        " is one stacked tensor, of one size.",
        f"{ONE_SIZE}, or pass batch_size=1 to run each input alone (each tensor captured must then keep one"
        " shape whatever the size: reduce='mean' or 'max', or layers after the global pool).",
    )


def follows_size(
    first: Path, size: Size, path: Path, shape: Size, tensor: str, was: Size, now: Size
) -> InputError:
    """With ``batch_size=1``: the input ``path`` (of ``shape``) gave ``tensor`` another shape than the inputs
    before it did, and its file holds one."""
    return InputError(
        f"transform= made `{path}` {shape}, another size than the first input's (`{first}`: {size}), and"
        f" the shape of `{tensor}` follows it: {now} for this input, {was} for those before. Each tensor's"
        " file holds one shape.",
        f"{ONE_SIZE}, or capture tensors of one shape whatever the size (reduce='mean' or 'max', or layers"
        " after the global pool).",
    )


def model_refuses(first: Path, size: Size, path: Path, shape: Size, model: str, exc: Exception) -> InputError:
    """With ``batch_size=1``: the model raised on the input ``path``, of another size than the first's."""
    why = (str(exc).strip().splitlines() or [""])[0][:300]
    return InputError(
        f"transform= made `{path}` {shape}, another size than the first input's (`{first}`: {size}), and"
        f" {model} cannot take it: {type(exc).__name__}: {why}",
        f"{ONE_SIZE}, one the model takes (it took the first input's).",
    )
