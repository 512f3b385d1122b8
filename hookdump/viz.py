"""A captured tensor as a PNG: a grid of its channels, or a heat map over the photo. Never prints.

How a tensor becomes ``(C, H, W)`` maps of one image (``index`` picks the image; the batch is first):

* ``(N, C, H, W)``: the maps as they are.
* ``(N, L, C)`` tokens: when ``L`` is a perfect square ``h*h``, token ``i`` sits at row ``i // h``, column
  ``i % h`` (row-major, as ViT / Swin / Twins flatten them); when ``L - 1`` is one, the first token (a class
  token) is dropped first. Any other ``L`` (several prefix tokens, a non-square grid) is refused.
* ``(N, K)`` vectors (a classifier's logits, pooled features) and other ranks are refused: they hold no
  spatial map. Refusals are input errors (exit 4).

The grid: each channel min-max scaled to 0..255 on its own (a constant channel is black), the first
``max_channels`` of them, ``ceil(sqrt(shown))`` per row, ``PADDING`` pixels of ``SEPARATOR`` colour between
and around the tiles; maps smaller than ``MIN_TILE`` pixels are enlarged by the whole factor
``MIN_TILE // max(H, W)`` (nearest neighbour). So the PNG is ``cols * (W*s + p) + p`` wide and
``rows * (H*s + p) + p`` high; a single channel is drawn alone, without padding (as ``make_grid`` does).

The overlay: the mean of ``|activation|`` over all channels, min-max scaled, through an inferno-like
colour map, resized (bilinear) onto the photo and blended with weight ``alpha``. When the tensor comes from
a capture folder, the photo is first resized and center-cropped the way the model's eval transform did
(the manifest's ``transform``: ``input_size``, ``crop_pct``, ``interpolation``), so the heat map lies on what
the model saw; otherwise the map is stretched over the whole photo.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .errors import InputError, UsageError
from .images import open_image
from .tensorfile import Loaded, load

if TYPE_CHECKING:
    from PIL.Image import Image

PADDING = 2
MIN_TILE = 64
SEPARATOR = (40, 90, 160)
#: Anchors of an inferno-like colour map (black, purple, red, orange, pale yellow), interpolated to 256.
_ANCHORS = np.array([[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]], float)
LUT = np.stack(
    [np.interp(np.linspace(0, 1, 256), np.linspace(0, 1, len(_ANCHORS)), _ANCHORS[:, c]) for c in range(3)],
    axis=1,
).astype(np.uint8)


@dataclass
class Rendered:
    """One PNG written by :func:`show`, and what it shows."""

    path: Path
    width: int
    height: int
    source: str
    name: str
    shape: list[int]
    index: int
    layout: str
    channels: int
    channels_shown: int
    columns: int = 0
    tile: tuple[int, int] = (0, 0)
    overlay: Path | None = None
    fit: str = ""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """``show --json``: every field, paths as strings."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


def feature_maps(tensor: torch.Tensor, index: int) -> tuple[torch.Tensor, str]:
    """``(C, H, W)`` float maps of image ``index``, and how they were read (see the module docstring)."""
    shape = tuple(tensor.shape)
    if tensor.dim() not in (3, 4):
        what = "a vector per image" if tensor.dim() == 2 else f"{tensor.dim()} dimensions"
        raise InputError(
            f"A tensor of shape {shape} ({what}) has no spatial map to draw.",
            "show draws (N, C, H, W) feature maps and (N, L, C) tokens on a square grid; pick a layer whose"
            " output is spatial (`hookdump list-modules` shows the output shapes).",
        )
    if not 0 <= index < shape[0]:
        raise UsageError(
            f"--index {index} is out of range: the tensor holds {shape[0]} image(s).",
            f"Use --index 0 to {shape[0] - 1}.",
        )
    item = torch.nan_to_num(tensor[index].float())
    if tensor.dim() == 4:
        return item, f"{shape[1]} maps of {shape[2]}x{shape[3]}"
    tokens, channels = shape[1], shape[2]
    for prefix in (0, 1):
        side = math.isqrt(max(tokens - prefix, 0))
        if tokens - prefix > 0 and side * side == tokens - prefix:
            maps = item[prefix:].T.reshape(channels, side, side)
            dropped = " (first token dropped: a class token)" if prefix else ""
            return maps, f"{tokens} tokens of {channels} channels as a {side}x{side} grid{dropped}"
    raise InputError(
        f"A tensor of shape {shape}: {tokens} tokens are not a square grid (nor a class token plus one).",
        "show reshapes (N, L, C) tokens when L or L-1 is a perfect square; reshape this one yourself.",
    )


def scaled(maps: torch.Tensor) -> torch.Tensor:
    """Each map min-max scaled to 0..1 on its own; a constant map becomes 0."""
    flat = maps.reshape(maps.shape[0], -1)
    low, high = flat.min(dim=1).values, flat.max(dim=1).values
    span = torch.where(high > low, high - low, torch.ones_like(high))
    out = (flat - low[:, None]) / span[:, None]
    return out.reshape(maps.shape).clamp(0, 1)


def channel_grid(maps: torch.Tensor, max_channels: int = 64) -> tuple[np.ndarray, int, int, tuple[int, int]]:
    """The grid image (H, W, 3 uint8), channels shown, columns, tile size (h, w) in the image."""
    from torchvision.utils import make_grid

    shown = maps[:max_channels]
    factor = max(1, MIN_TILE // max(shown.shape[1:]))
    tiles = scaled(shown).repeat_interleave(factor, 1).repeat_interleave(factor, 2)
    columns = math.ceil(math.sqrt(len(tiles)))
    grid = make_grid(tiles.unsqueeze(1), nrow=columns, padding=PADDING, pad_value=-1.0)
    plane = grid[0] if grid.dim() == 3 else grid
    gray = (plane.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    image = np.repeat(gray[:, :, None], 3, axis=2)
    image[plane.numpy() < 0] = SEPARATOR
    return image, len(tiles), columns, (tiles.shape[1], tiles.shape[2])


def heat_map(maps: torch.Tensor) -> np.ndarray:
    """Mean |activation| over channels, min-max scaled to 0..1, as float32 (H, W)."""
    return scaled(maps.abs().mean(dim=0, keepdim=True))[0].numpy().astype(np.float32)


def overlay(heat: np.ndarray, photo: Image, alpha: float) -> np.ndarray:
    """``heat`` (0..1) resized bilinearly to ``photo``, coloured, and blended onto it with weight alpha."""
    from PIL import Image as PILImage

    resized = PILImage.fromarray(heat).resize(photo.size, PILImage.Resampling.BILINEAR)
    levels = np.clip(np.asarray(resized) * 255 + 0.5, 0, 255).astype(np.uint8)
    blend = (1 - alpha) * np.asarray(photo.convert("RGB"), float) + alpha * LUT[levels].astype(float)
    return np.clip(blend + 0.5, 0, 255).astype(np.uint8)


def fit_photo(photo: Image, transform: dict[str, Any] | None) -> tuple[Image, str]:
    """The photo as the model's eval transform cropped it (when the manifest says how), and how."""
    if not transform or "input_size" not in transform:
        return photo, f"the whole photo ({photo.width}x{photo.height}; no capture manifest beside the file)"
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as tf

    _, height, width = (int(d) for d in transform["input_size"])
    crop_pct = float(transform.get("crop_pct") or 1.0)
    try:
        mode = InterpolationMode(transform.get("interpolation", "bilinear"))
    except ValueError:
        mode = InterpolationMode.BILINEAR
    size = [math.floor(height / crop_pct), math.floor(width / crop_pct)]
    fitted = tf.resize(photo, size[:1] if height == width else size, interpolation=mode)
    fitted = tf.center_crop(fitted, [height, width])
    return fitted, f"resized and center-cropped to {width}x{height} as the model's eval transform did"


def default_output(loaded: Loaded, with_overlay: bool) -> Path:
    """``<stem>.png`` (``<stem>.overlay.png`` with an overlay) next to the tensor file."""
    stem = (loaded.key or loaded.path.stem).replace("/", "_")
    return loaded.path.parent / f"{stem}{'.overlay' if with_overlay else ''}.png"


def show(
    file: Path,
    *,
    key: str | None = None,
    output: Path | None = None,
    index: int = 0,
    max_channels: int = 64,
    photo: Path | None = None,
    alpha: float = 0.5,
) -> Rendered:
    """Render the tensor in ``file`` as a channel grid, or as a heat map over ``photo``; write a PNG."""
    if output is not None and output.suffix.lower() != ".png":
        raise UsageError(f"--output `{output}` does not end in .png.", "Name the PNG file, e.g. -o maps.png.")
    loaded = load(file, key)
    maps, layout = feature_maps(loaded.tensor, index)
    out = output or default_output(loaded, photo is not None)
    shape = list(loaded.tensor.shape)
    common: dict[str, Any] = dict(
        source=loaded.source, name=loaded.name, shape=shape, index=index, layout=layout, channels=len(maps)
    )
    if photo is None:
        image, shown, columns, tile = channel_grid(maps, max_channels)
        _write_png(image, out)
        return Rendered(out, image.shape[1], image.shape[0], **common, channels_shown=shown,
                        columns=columns, tile=tile)  # fmt: skip
    picture = open_image(photo, option="--overlay")
    fitted, fit = fit_photo(picture, (loaded.manifest or {}).get("transform"))
    image = overlay(heat_map(maps), fitted, alpha)
    _write_png(image, out)
    notes = _photo_notes(loaded, photo, index)
    return Rendered(out, image.shape[1], image.shape[0], **common, channels_shown=len(maps),
                    overlay=photo, fit=fit, notes=notes)  # fmt: skip


def _photo_notes(loaded: Loaded, photo: Path, index: int) -> list[str]:
    """A note when the manifest says image ``index`` was another photo than ``photo``."""
    inputs = (loaded.manifest or {}).get("inputs") or []
    if index >= len(inputs) or not isinstance(inputs[index], dict) or "sha256" not in inputs[index]:
        return []
    from .inputs import sha256

    if sha256(photo) == inputs[index]["sha256"]:
        return []
    return [f"`{photo}` is not the image {index} of this capture (`{inputs[index].get('path')}`)."]


def _write_png(image: np.ndarray, out: Path) -> None:
    """Write atomically: a temporary file in the same folder, then a rename. The file is created the
    ordinary way, so it gets the user's usual permissions (umask), not mkstemp's 0600."""
    from PIL import Image as PILImage

    tmp = out.parent / f".hookdump-{os.getpid()}-{out.name}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        PILImage.fromarray(image).save(tmp, format="PNG")
        os.replace(tmp, out)
    except OSError as exc:
        raise UsageError(f"Cannot write `{out}`: {exc}", "Choose another --output.") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
