"""``hookdump top OUT --layer L``: the k inputs with the largest activation of each channel (its map's
maximum or mean over space; for tokens, over the token positions; for an ``(N, C)`` tensor, such as a
``--reduce``'d capture or logits, the value itself), found in one streamed pass over the
capture (a running top-k per channel, one input's maps read at a time: ``topk.py``), and a
contact sheet per channel: each top input as the model saw it with the channel's map over it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError, check_choice
from ..pictures.contact import contact_sheet, tile
from ..pictures.grid import _range
from ..pictures.maps import feature_maps
from ..store.folder import claims
from ..store.folder.reader import Capture
from ..store.folder.tensorfile import Loaded, load
from ..store.formats import nonfinite
from ..units import first_few
from .captures import open_capture
from .results import TOP_FOLDER, TOP_JSON, result_writer
from .topk import one_value_per_channel, running_top

BY = ("max", "mean")
DEFAULT_CHANNELS = 16


@dataclass
class ChannelTop:
    """One channel's top inputs, best first: ``(input index, file, value)``; its contact sheet."""

    channel: int
    inputs: list[dict[str, Any]]
    png: Path | None = None
    excluded: list[dict[str, Any]] = field(default_factory=list)  # NaN or infinite scores: not ranked


@dataclass
class TopResult:
    out: Path
    layer: str
    by: str
    k: int
    channels: list[ChannelTop]
    notes: list[str] = field(default_factory=list)
    record: Path | None = None  # the sheets' top.json, which ``hookdump report`` shows

    def as_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "layer": self.layer, "by": self.by, "k": self.k,
            "channels": [
                {
                    "channel": c.channel, "top": c.inputs, "png": None if c.png is None else str(c.png),
                    "excluded": c.excluded,
                }
                for c in self.channels
            ],
            "notes": self.notes, "record": None if self.record is None else str(self.record),
        }  # fmt: skip

    def summary(self) -> str:
        lines = [f"top {self.k} inputs by the {self.by} of each channel of {self.layer} in {self.out}:"]
        for c in self.channels:
            best = ", ".join(f"{Path(i['input']).name} {i['value']:.3g}" for i in c.inputs[:3])
            more = f", ... ({len(c.inputs)})" if len(c.inputs) > 3 else ""
            left = f"{', ' * bool(best)}{len(c.excluded)} left out (NaN or infinite)" if c.excluded else ""
            lines.append(f"  channel {c.channel}: {best}{more}{left}" + (f"  -> {c.png}" if c.png else ""))
        return "\n".join(lines + ([f"wrote {self.record}"] if self.record else []))


def top(
    out: str | os.PathLike[str],
    layer: str,
    *,
    channel: int | None = None,
    channels: str | None = None,
    k: int = 9,
    by: str = "max",
    sheets: str | os.PathLike[str] | None = None,
    png: bool = True,
) -> TopResult:
    """The top ``k`` inputs of each channel of tensor ``layer`` of capture ``out``.

    Args:
        channel / channels: one channel, or ``A:B`` (half-open); default the first 16.
        by: ``max`` or ``mean`` of each channel's map of an input.
        sheets: the folder of the contact sheets (default ``OUT/top/<layer>``), ``channel-<C>.png`` each,
            and ``top.json`` (what ``as_dict`` gives, and the manifest's sha256), which ``hookdump report``
            shows.
    """
    check_choice("--by", by, BY)
    if k < 1:
        raise UsageError(f"-k {k}: at least 1 input per channel.", "Use e.g. -k 9.")
    if channel is not None and channels is not None:
        raise UsageError("--channel and --channels both given.", "Give one channel, or a range A:B.")
    capture = open_capture(Path(out))
    loaded = load(capture.path, layer)
    vector = one_value_per_channel(loaded)
    # (N, C) (a --reduce'd capture, logits, pooled features) or maps; any other tensor is refused, naming it
    count = int(loaded.array.shape[1]) if vector else int(feature_maps(loaded, 0).maps.shape[0])
    picked = _channels(channel, channels, count, layer)
    if not png:
        return _top(capture, loaded, layer, picked, k, by, vector, None)
    folder = Path(sheets) if sheets is not None else capture.path / TOP_FOLDER / layer
    names = [f"channel-{c}.png" for c in picked] + [TOP_JSON]
    with claims.claim(folder, names, "top", "--sheets") as writing:
        found = _top(capture, loaded, layer, picked, k, by, vector, writing)
        writing.commit()
    return found


def _top(
    capture: Capture,
    loaded: Loaded,
    layer: str,
    picked: list[int],
    k: int,
    by: str,
    vector: bool,
    writing: claims.Claim | None,
) -> TopResult:
    """Rank, then (``writing``) stage a contact sheet per channel and ``top.json``."""
    excluded: dict[int, list[int]] = {}
    counted = nonfinite.Count()
    best_value, best_index = running_top(loaded, picked, k, by, vector, excluded, counted)
    notes = [f"-k {k}: the capture holds {loaded.count} inputs"] if k > loaded.count else []
    if vector:
        reduced = ((loaded.manifest or {}).get("options") or {}).get("reduce")
        how = f"--reduce {reduced} at capture" if reduced else f"shape {tuple(loaded.array.shape)}"
        notes.append(
            f"{layer} holds one value per channel per input ({how}): each input is ranked by it, --by does"
            " not apply, and the sheets show the inputs without a map"
        )
        by = "value"
    inputs = capture.inputs
    result = []
    for row, c in enumerate(picked):
        chosen = [
            {"index": int(i), "input": _name(inputs, int(i)), "value": float(v)}
            for v, i in zip(best_value[row], best_index[row], strict=True)
            if np.isfinite(v)
        ]
        left_out = [{"index": i, "input": _name(inputs, i)} for i in excluded.get(c, [])]
        record = ChannelTop(c, chosen, excluded=left_out)
        if writing is not None and chosen:  # no finite score, no sheet: the note says why
            record.png = writing.stage(f"channel-{c}.png", _sheet(loaded, c, chosen, by, vector))
        result.append(record)
    drawn = "the sheets draw them in magenta" if writing is not None and not vector else ""
    notes += nonfinite.note(f"{layer} ({_span(picked)})", counted, drawn)
    notes += _excluded_note(layer, by, result)
    found = TopResult(capture.path, layer, by, k, result, notes)
    if writing is not None:
        found.record = writing.path(TOP_JSON)
        writing.stage(TOP_JSON, result_writer("top", found.as_dict(), {"out": capture.path}))
    return found


def _excluded_note(layer: str, by: str, channels: list[ChannelTop]) -> list[str]:
    """What was left out of the ranking for a score that is NaN or infinite, channel by channel."""
    hit = [c for c in channels if c.excluded]
    if not hit:
        return []
    inputs = list(dict.fromkeys(i["input"] for c in hit for i in c.excluded))
    score = "value" if by == "value" else f"{by} of the map"
    return [
        f"{len(inputs)} input(s) left out of the ranking of {len(hit)} channel(s) of {layer}"
        f" ({first_few([str(c.channel) for c in hit])}): their {score} is NaN or infinite"
        f" ({first_few(inputs)}); the JSON's `excluded` lists them per channel"
    ]


def _span(picked: list[int]) -> str:
    """``channel 3`` or ``channels 0:16`` (half-open, as --channels has it): the channels ranked."""
    return f"channel {picked[0]}" if len(picked) == 1 else f"channels {picked[0]}:{picked[-1] + 1}"


def _name(inputs: list[dict[str, Any]], i: int) -> str:
    """Input ``i``'s file as the manifest names it (``input i`` for a random input)."""
    return str(inputs[i].get("path", f"input {i}")) if i < len(inputs) else f"input {i}"


def _channels(channel: int | None, channels: str | None, count: int, layer: str) -> list[int]:
    if channel is not None:
        if not 0 <= channel < count:
            raise UsageError(
                f"--channel {channel} is outside the {count} channels of {layer}.", f"Use 0 to {count - 1}."
            )
        return [channel]
    start, stop = (
        _range(channels, count, layer) if channels is not None else (0, min(count, DEFAULT_CHANNELS))
    )
    return list(range(start, stop))


def _sheet(
    loaded: Loaded, c: int, chosen: list[dict[str, Any]], by: str, vector: bool
) -> Callable[[Path], object]:
    transform = (loaded.manifest or {}).get("transform")
    tiles, labels = [], []
    for item in chosen:
        channel_map = None if vector else feature_maps(loaded, item["index"]).maps[c]
        photo = None if item["input"].startswith("input ") else Path(item["input"])
        if photo is not None and not photo.is_absolute():  # relative to where the capture ran
            photo = Path((loaded.manifest or {}).get("cwd") or ".") / photo
        tiles.append(tile(channel_map, photo, transform))
        labels.append(f"{Path(item['input']).name} {item['value']:.3g}")
    caption = f"{loaded.stem} channel {c}: top {len(chosen)} inputs by {by}"
    return contact_sheet(tiles, labels, caption)
