"""The inputs' records for the manifest: each input's (as the decoding workers made it, else read here),
finished with what the worker could not know (``--sample``, a class folder's label); the seeded random
input's; the note naming the inputs of several frames."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..units import first_few
from . import classfolders
from .fetch import shown
from .images import describe, digest, labels
from .spec import InputSpec
from .transforms import model_mode
from .walk import IMAGE_SUFFIXES


def records(
    paths: list[Path],
    source: InputSpec,
    config: dict[str, Any],
    made: list[dict[str, Any]] | None = None,
    finish: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The inputs' records: each path's as the decoding workers made it (``made``: in the run's order,
    finished by ``finish``, ``finisher``'s), else read here; or the seeded random input."""
    if source.random:
        return [{"random": True, "seed": source.seed, "shape": [1, *config["input_size"]]}]
    made = made or []
    if len(made) == len(paths) and all(
        "mode" in r and r["path"] == shown(p) for r, p in zip(made, paths, strict=True)
    ):  # every input decoded by this run (or the run it resumes), in order: the usual case
        return made
    mode, key, known = model_mode(config), source.image_part, {r["path"]: r for r in made}

    def record(path: Path) -> dict[str, Any]:
        nonlocal finish
        found = known.get(shown(path), {})
        if "mode" in found:
            return found
        # Not decoded by this run (a --resume of a run whose journal kept each input's sha256 alone).
        finish = finish or finisher(paths, source)
        return finish(
            {
                "path": shown(path), "sha256": found.get("sha256") or digest(path, key),
                **describe(path, mode, key), **labels(path, source.label_column),
            }
        )  # fmt: skip

    return [record(p) for p in paths]


def finisher(paths: list[Path], source: InputSpec) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What a record the decoding worker made (``images.read``, ``images.labels``) is given before it is
    kept: --sample's flag, the label of an input in a class folder."""
    sample = {"sample": True} if source.sample else {}
    classes = classfolders.labels(paths, source.paths, IMAGE_SUFFIXES)

    def finish(record: dict[str, Any]) -> dict[str, Any]:
        label = classes.get(record["path"]) if classes else None
        if label is None and not sample:  # most inputs: the record as the worker made it
            return record
        return {**record, **sample, **({} if label is None else {"label": label})}

    return finish


def frame_notes(records: list[dict[str, Any]]) -> list[str]:
    """A note naming the inputs of several frames (an animated GIF, a multi-page TIFF): frame 0 is used."""
    many = [r for r in records if r.get("frames", 1) > 1]
    if not many:
        return []
    shown = first_few([f"{r['path']} ({r['frames']} frames)" for r in many])
    return [
        f"{len(many)} input(s) hold several frames, an animation or pages: {shown}; frame 0 of each was"
        " used (the manifest's inputs say `frames`, `frame_used`)"
    ]
