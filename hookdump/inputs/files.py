"""Input paths (files, folders, globs, ``@list.txt``) to batches made by the model's own eval transform."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..digest import sha256
from ..errors import InputError, UsageError
from ..model.build import ALIASES
from ..units import first_few, human_bytes
from .images import check_image, describe, open_image

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}


@dataclass(frozen=True)
class InputSpec:
    """Where the images come from."""

    paths: tuple[str, ...] = ()
    sample: bool = False
    random: bool = False
    seed: int = 0
    input_size: tuple[int, int, int] | None = None


def sample_path() -> Path:
    """The public-domain photo bundled with hookdump (scikit-image's ``chelsea``, downscaled)."""
    return Path(str(resources.files("hookdump") / "data" / "sample.jpg"))


def parse_input_size(text: str) -> tuple[int, int, int]:
    """``3,224,224`` -> ``(3, 224, 224)``."""
    parts = text.replace("x", ",").split(",")
    try:
        c, h, w = (int(p) for p in parts)
    except ValueError:
        c = h = w = 0
    if min(c, h, w) < 1:
        raise UsageError(f"--input-size `{text}` is not C,H,W.", "Write it like 3,224,224.")
    return c, h, w


def collect(
    spec: InputSpec,
    exclude: tuple[Path, ...] = (),
    skipped: list[dict[str, str]] | None = None,
    where: list[int] | None = None,
    notes: list[str] | None = None,
) -> list[Path]:
    """Every image path the user named, in a stable order, checked; folder walks never enter ``exclude``
    (``notes`` gets a line for each such folder that holds images).

    With ``skipped`` (``--skip-bad``), a file that is not a readable image is recorded there (path, reason)
    instead of stopping the run; ``where`` gets, for each, the number of images kept before it.
    """
    given = sum([bool(spec.paths), spec.sample, spec.random])
    if given == 0:
        raise UsageError(
            "No input given.",
            "Pass image files or folders, --sample for the bundled photo, or --random-input.",
        )
    if given > 1:
        raise UsageError("Give images, --sample or --random-input, not several.", "Keep one of them.")
    if spec.random:
        return []
    if spec.sample:
        return [sample_path()]
    skip = frozenset(p.resolve() for p in exclude)
    found: list[Path] = []
    left_out: list[Path] = []
    for text in spec.paths:
        found.extend(_expand(text, skip, left_out))
    for folder in dict.fromkeys(left_out):
        if notes is not None and (count := len(_walk(folder, frozenset(), []))):
            notes.append(
                f"the folder walk left out `{folder}`, the output folder (--out), and the {count} image(s) in"
                " it: captures are never read as inputs (pass such a file by its path to take it)"
            )
    kept = _kept(found, check_image, skipped, where)
    if found and not kept:
        raise none_readable(skipped or [])
    return kept


def decode_all(paths: list[Path], config: dict[str, Any], skipped: list[dict[str, str]] | None) -> list[Path]:
    """``--dry-run``: every input decoded as the run decodes it (a truncated file, a float image out of
    range refused, or with ``skipped`` recorded, the same way); the pixels are dropped."""
    mode = model_mode(config)
    kept = _kept(paths, lambda path: open_image(path, mode).close(), skipped)
    if paths and not kept:
        raise none_readable(skipped or [])
    return kept


def skipped_note(skipped: list[dict[str, str]], verb: str = "left out", said_in_manifest: bool = True) -> str:
    """``--skip-bad left out 2 unreadable input(s) (a.jpg, b.png); the manifest's `skipped` says why``: the
    first three named."""
    shown = first_few([s["path"] for s in skipped])
    why = "; the manifest's `skipped` says why" if said_in_manifest else ""
    return f"--skip-bad {verb} {len(skipped)} unreadable input(s) ({shown}){why}"


def _kept(
    paths: list[Path],
    check: Callable[[Path], None],
    skipped: list[dict[str, str]] | None,
    where: list[int] | None = None,
) -> list[Path]:
    """The paths that pass ``check``; a failure raises, or with ``skipped`` is recorded there (and in
    ``where`` the number of paths kept before it)."""
    kept: list[Path] = []
    for path in paths:
        try:
            check(path)
        except InputError as exc:
            if skipped is None:
                raise
            skipped.append({"path": str(path), "reason": exc.message})
            if where is not None:
                where.append(len(kept))
            continue
        kept.append(path)
    return kept


def none_readable(skipped: list[dict[str, str]]) -> InputError:
    """``--skip-bad`` left out every input: a capture of nothing must fail, as an empty folder does."""
    first = f" (`{skipped[0]['path']}`: {skipped[0]['reason']})" if skipped else ""
    return InputError(
        f"No image to capture: --skip-bad left out all {len(skipped)} input(s) as unreadable{first}.",
        "Fix or replace the inputs: --skip-bad leaves out some bad images, not all of them.",
    )


def _expand(text: str, skip: frozenset[Path], left_out: list[Path]) -> list[Path]:
    if text.startswith("@"):
        listing = Path(text[1:])
        if not listing.is_file():
            raise InputError(f"List file `{listing}` does not exist.", "Write one image path a line in it.")
        lines = [ln.strip() for ln in listing.read_text().splitlines()]
        paths = [Path(ln) for ln in lines if ln and not ln.startswith("#")]
        if not paths:
            raise InputError(f"List file `{listing}` holds no images.", "Write one image path a line in it.")
        return [p if p.exists() or p.is_absolute() else listing.parent / p for p in paths]
    path = Path(text)
    if path.is_dir():
        images = _walk(path, skip, left_out)
        if not images:
            raise InputError(
                f"Folder `{path}` holds no images.", f"hookdump reads {', '.join(sorted(IMAGE_SUFFIXES))}."
            )
        return images
    if path.exists():
        return [path]
    if path.is_symlink():
        raise InputError(
            f"Input `{text}` is a symbolic link that leads nowhere (a loop, or its target is gone).",
            "Point the link at an image file, or pass the file itself.",
        )
    if set(text) & set("*?["):
        matches = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not matches:
            raise InputError(
                f"The pattern `{text}` matches no file.", "Check the pattern (quote it in the shell)."
            )
        return matches
    if _is_model_name(text):
        raise InputError(
            f"Input `{text}` does not exist: it is the name of a model, not an image.",
            f"Give the model with -m: hookdump capture -m {text} IMAGES... -l LAYER.",
        )
    raise InputError(f"Input `{text}` does not exist.", "Pass image files, folders, globs or @list.txt.")


def _is_model_name(text: str) -> bool:
    """Whether ``text`` names a timm model (or a Twins alias), as people pass it to list-modules."""
    import timm

    if text.startswith("tv:"):  # torchvision's, as -m tv:NAME takes them
        return text[3:].isidentifier()
    return "/" not in text and (text in ALIASES or timm.is_model(text))


def _walk(folder: Path, skip: frozenset[Path], left_out: list[Path]) -> list[Path]:
    """Image files under ``folder``, sorted; hidden names (``.x``, AppleDouble ``._x``) and ``skip`` left out
    (the folders of ``skip`` met are added to ``left_out``).

    Symlinked files are taken, symlinked folders are not entered (no loops); an unreadable folder is an error.
    """

    def refuse(error: OSError) -> None:
        raise InputError(
            f"Folder `{error.filename}` cannot be read: {error.strerror}.",
            "Make it readable (chmod u+rx), or move it out of the input folder.",
        )

    images: list[Path] = []
    for root, dirs, files in os.walk(folder, onerror=refuse, followlinks=False):
        here = Path(root)
        left_out += [here / d for d in dirs if (here / d).resolve() in skip]
        dirs[:] = [d for d in dirs if not d.startswith(".") and (here / d).resolve() not in skip]
        for name in files:
            path = here / name
            if not name.startswith(".") and path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
                images.append(path)
    return sorted(images)


def data_config(model: nn.Module, input_size: tuple[int, int, int] | None) -> dict[str, Any]:
    """timm's eval data config for this model, with ``--input-size`` applied, and the channels of the model's
    first conv (``--model-arg in_chans=1``) where timm's config keeps 3; a mean and std of another channel
    count are averaged to this one's."""
    from timm.data import resolve_data_config

    config: dict[str, Any] = dict(resolve_data_config({}, model=model))
    if input_size is not None:
        _check_fits_memory(input_size)
        config["input_size"] = tuple(input_size)
    elif chans := _first_conv_channels(model):
        config["input_size"] = (chans, *config["input_size"][1:])
    count = config["input_size"][0]
    for key in ("mean", "std"):
        if len(config[key]) != count:
            config[key] = (sum(config[key]) / len(config[key]),) * count
    return config


def fixed_config(config: dict[str, Any], input_size: tuple[int, int, int] | None) -> dict[str, Any]:
    """A data config a model source gave (torchvision's: ``resize`` then a center crop), with
    ``--input-size`` applied: the crop is that size, the resize keeps its ratio to the crop (``crop_pct``)."""
    config = dict(config)
    if input_size is not None:
        _check_fits_memory(input_size)
        config["input_size"] = tuple(input_size)
        if "resize" in config:
            config["resize"] = int(min(input_size[1:]) / config["crop_pct"])
    count = config["input_size"][0]
    for key in ("mean", "std"):
        if len(config[key]) != count:
            config[key] = (sum(config[key]) / len(config[key]),) * count
    return config


#: The image a caller's transform is tried on when there is no input to try it on (--random-input).
PROBE_SIZE = (256, 256)


def callable_config(
    transform: Callable[[Any], torch.Tensor], paths: list[Path], input_size: tuple[int, int, int] | None
) -> dict[str, Any]:
    """A caller's eval transform (a PIL image to a ``(C, H, W)`` float tensor) as a data config: its input
    size is what it makes of the first input (a grey image without one), unless ``input_size`` is given;
    mean, std and the rest are the transform's own business (None)."""
    from PIL import Image

    where = f"`{paths[0]}`" if paths else f"a grey {PROBE_SIZE[0]}x{PROBE_SIZE[1]} image"
    image = open_image(paths[0], "RGB") if paths else Image.new("RGB", PROBE_SIZE, (128, 128, 128))
    try:
        made = transform(image)
    except Exception as exc:
        raise UsageError(
            f"transform= raised {type(exc).__name__} on {where}: {exc}",
            "Pass a callable that takes a PIL image (RGB) and returns a (C, H, W) float tensor.",
        ) from exc
    if not isinstance(made, torch.Tensor) or made.dim() != 3 or not made.is_floating_point():
        what = (
            f"a {made.dim()}-D {made.dtype} tensor" if isinstance(made, torch.Tensor) else type(made).__name__
        )
        raise UsageError(
            f"transform= made {what} of {where}: hookdump stacks (C, H, W) float tensors into batches.",
            "End the transform with ToTensor() (or a float conversion) and Normalize(mean, std).",
        )
    size = tuple(input_size) if input_size is not None else tuple(made.shape)
    if input_size is not None:
        _check_fits_memory(input_size)
    kind = f"{type(transform).__module__}.{type(transform).__qualname__}"
    return {
        "input_size": size, "mean": None, "std": None, "interpolation": None, "crop_pct": None,
        "crop_mode": None, "callable": transform, "from": f"transform= ({kind})",
    }  # fmt: skip


def _first_conv_channels(model: nn.Module) -> int | None:
    """The input channels of the model's first conv, as its timm config names it (None when it does not)."""
    name = (getattr(model, "pretrained_cfg", None) or {}).get("first_conv")
    try:
        channels = getattr(model.get_submodule(name), "in_channels", None) if isinstance(name, str) else None
    except AttributeError:
        return None
    return channels if isinstance(channels, int) else None


def _check_fits_memory(input_size: tuple[int, int, int]) -> None:
    """Refuse an ``--input-size`` of which one image alone would not fit in the machine's memory."""
    needed = 4 * input_size[0] * input_size[1] * input_size[2]
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on this system
        return
    if needed > memory:
        raise UsageError(
            f"--input-size {','.join(map(str, input_size))}: one image of that size takes"
            f" {human_bytes(needed)}, more than this machine's {human_bytes(memory)} of memory.",
            "Use a smaller --input-size (or leave it out for the model's own).",
        )


def model_mode(config: dict[str, Any]) -> str:
    """The PIL mode the model's images are decoded to: a caller's transform always gets RGB."""
    if config.get("callable") is not None:
        return "RGB"
    return "L" if config["input_size"][0] == 1 else "RGB"


def random_batch(config: dict[str, Any], seed: int) -> torch.Tensor:
    """One seeded standard-normal input of the model's input size."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((1, *config["input_size"]), generator=generator)


def records(
    paths: list[Path], source: InputSpec, config: dict[str, Any], hashes: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The manifest's ``inputs``: each path with its sha256 (from ``hashes``, taken as it was captured,
    where given) and ``describe``, or the seeded random input."""
    if source.random:
        return [{"random": True, "seed": source.seed, "shape": [1, *config["input_size"]]}]
    mode = model_mode(config)
    sample = {"sample": True} if source.sample else {}
    known = hashes or {}
    return [
        {"path": str(p), "sha256": known.get(str(p)) or sha256(p), **describe(p, mode), **sample}
        for p in paths
    ]


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
