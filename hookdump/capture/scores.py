"""What ``--grad`` differentiates: the model's class scores, ``(batch, classes)``, and ``--target`` one of
them. One check for the plan (the meta trace's output shapes: ``--dry-run`` says what the run would) and for
the run (the real output), so the two cannot disagree."""

from __future__ import annotations

from ..errors import LayerError, UsageError


def check(shapes: list[list[int]] | None, target: int | None, model: str, plain: bool = True) -> None:
    """Refuse ``--grad`` when the model's output (``shapes``: one shape per tensor it returns, ``plain``
    when it is a tensor, not a tuple or dict of them; None when not traced) is not one ``(batch, classes)``
    tensor, and a ``target`` that is not one of its classes."""
    if shapes is None:
        return
    if not plain or len(shapes) != 1 or len(shapes[0]) != 2:
        what = "no tensor" if not shapes else " and ".join(str(tuple(s)) for s in shapes[:3])
        what = what if plain else f"a {'tuple or dict' if shapes else 'value'} of {what}"
        raise LayerError(
            f"--grad needs the model to return class scores of shape (batch, classes); {model} returns"
            f" {what}.",
            "Drop --grad for this model, or capture without gradients.",
        )
    classes = shapes[0][1]
    if target is not None and target >= classes:
        raise UsageError(
            f"--target {target} is not a class of {model}.",
            f"It scores {classes} classes: use 0 ... {classes - 1}.",
        )
