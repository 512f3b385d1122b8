"""Webdataset tar shards as inputs, read in place (never extracted): ``train-{000..009}.tar`` (brace ranges
and lists as webdataset writes them), globs and ``@list.txt`` of shard paths. A sample is the members that
share a key (a member's path up to the first dot of its file name: ``n01440764_10026.jpg`` and
``n01440764_10026.cls``); its image is the first of jpg / jpeg / png / webp there is (``--image-key`` to
choose), its ``.cls`` its label, its ``.txt`` / ``.json`` its metadata. Each input is named ``SHARD::KEY``,
its address, everywhere a path is named; the image's bytes are read by seeking to the member (each process
indexes a shard once, by its members' headers)."""

from __future__ import annotations

import functools
import glob
import itertools
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError

if TYPE_CHECKING:
    from .spec import InputSpec

SEPARATOR = "::"
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp")
_BRACES = re.compile(r"\{([^{}]*)\}")


def names(text: str, listed: bool = False) -> bool:
    """Whether an input names tar shards (``x.tar``, ``x-{000..009}.tar``, ``shards/*.tar``), by its name
    alone (``listed``: a line of an ``@list`` file, the same)."""
    return text.lower().endswith(".tar")


def addresses(text: str, spec: InputSpec) -> list[Path]:
    """Every sample of the shards ``text`` names, as ``SHARD::KEY``, in order."""
    return [address(shard, key) for shard in shard_paths(text) for key in samples(shard)]


def is_part(path: Path | str) -> bool:
    """Whether an input address is a sample of a shard (``SHARD::KEY``)."""
    shard, sep, _ = str(path).partition(SEPARATOR)
    return bool(sep) and shard.lower().endswith(".tar")


def holds(path: Path | str) -> bool:
    """Whether the sample ``SHARD::KEY`` is there to be read (its shard there, holding its key)."""
    shard, key = split(path)
    try:
        return shard.is_file() and key in samples(shard)
    except InputError:
        return False


def braces(text: str) -> list[str]:
    """``a-{000..002}.tar`` -> ``a-000.tar``, ``a-001.tar``, ``a-002.tar`` (zero-padded as written);
    ``{a,b}`` lists; several groups multiply, in order."""
    parts: list[list[str]] = []
    last = 0
    for found in _BRACES.finditer(text):
        parts.append([text[last : found.start()]])
        body = found[1]
        ranged = re.fullmatch(r"(-?\d+)\.\.(-?\d+)", body)
        if ranged:
            first, end = ranged[1], ranged[2]
            width = len(first) if first.startswith("0") else 0
            step = 1 if int(end) >= int(first) else -1
            parts.append([str(n).zfill(width) for n in range(int(first), int(end) + step, step)])
        else:
            parts.append(body.split(","))
        last = found.end()
    parts.append([text[last:]])
    return ["".join(items) for items in itertools.product(*parts)]


def shard_paths(text: str) -> list[Path]:
    """The shards an input names (braces, then a glob), each there: the first missing one is an error."""
    named = braces(text)
    found: list[Path] = []
    for name in named:
        if set(name) & set("*?["):
            matches = sorted(Path(p) for p in glob.glob(name) if Path(p).is_file())
            if not matches:
                raise InputError(f"The pattern `{name}` matches no shard.", "Check the pattern (quote it).")
            found += matches
            continue
        path = Path(name)
        if not path.is_file():
            of = f" (of the {len(named)} `{text}` names)" if len(named) > 1 else ""
            raise InputError(
                f"Shard `{name}`{of} does not exist.",
                "Fix the range or the path: every shard a brace range names must be there.",
            )
        found.append(path)
    return found


@dataclass
class Sample:
    """The members of one key: each extension's (data offset, size) in the shard."""

    key: str
    members: dict[str, tuple[int, int]] = field(default_factory=dict)

    def image(self, image_key: str | None) -> str | None:
        """The extension of its image member: ``image_key``'s, else the first of ``IMAGE_KEYS`` there is."""
        keys = (image_key,) if image_key else IMAGE_KEYS
        return next((k for k in keys if k in self.members), None)


def samples(shard: Path) -> dict[str, Sample]:
    """The shard's samples by key, in order (its index, read once per process and file state)."""
    stat = shard.stat()
    return _index(str(shard), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _index(shard: str, size: int, mtime_ns: int) -> dict[str, Sample]:
    found: dict[str, Sample] = {}
    last = None
    try:
        with tarfile.open(shard, "r:") as tar:
            for info in tar:
                if not info.isfile():
                    continue
                if info.offset_data + info.size > size:
                    raise InputError(
                        f"Shard `{shard}` is cut short: its member `{info.name}` ends past the end of the"
                        f" file ({info.offset_data + info.size:,} of {size:,} bytes).",
                        "Fetch or write the shard again (a cut-short download or copy).",
                    )
                folder, _, base = info.name.rpartition("/")
                if base.startswith(".") or "." not in base:
                    continue
                stem, _, extension = base.partition(".")
                key = f"{folder}/{stem}" if folder else stem
                found.setdefault(key, Sample(key)).members[extension.lower()] = (info.offset_data, info.size)
                last = info.name
    except tarfile.TarError as exc:
        after = f" after its member `{last}`" if last else ""
        raise InputError(
            f"Shard `{shard}` is not a tar file hookdump can read{after}: {exc}.",
            "Pass tar shards as webdataset writes them (a cut-short download or copy: fetch it again).",
        ) from exc
    if not found:
        raise InputError(f"Shard `{shard}` holds no sample (an empty tar).", "Leave it out of the inputs.")
    return found


def address(shard: Path, key: str) -> Path:
    return Path(f"{shard}{SEPARATOR}{key}")


def split(path: Path | str) -> tuple[Path, str]:
    """``SHARD::KEY`` -> (shard, key)."""
    shard, _, key = str(path).partition(SEPARATOR)
    return Path(shard), key


def _sample(path: Path | str) -> tuple[Path, Sample]:
    shard, key = split(path)
    if not shard.is_file():
        raise InputError(f"Shard `{shard}` of input `{path}` does not exist.", "Restore the shard.")
    sample = samples(shard).get(key)
    if sample is not None:
        return shard, sample
    raise InputError(f"`{path}`: shard `{shard}` holds no key `{key}`.", "Pass keys the shard holds.")


def _read(shard: Path, where: tuple[int, int]) -> bytes:
    offset, size = where
    with open(shard, "rb") as file:
        file.seek(offset)
        return file.read(size)


def image_bytes(path: Path | str, image_key: str | None = None) -> bytes:
    """The bytes of a sample's image member; a sample without one is an InputError naming what it holds."""
    shard, sample = _sample(path)
    extension = sample.image(image_key)
    if extension is None:
        wanted = f"a .{image_key} member (--image-key)" if image_key else f"one of .{', .'.join(IMAGE_KEYS)}"
        held = ", ".join("." + e for e in sample.members)
        raise InputError(
            f"`{path}` has no image: its members are {held}, and hookdump reads {wanted}.",
            "Choose its image member with --image-key EXT, or leave the sample out (--skip-bad records it).",
        )
    return _read(shard, sample.members[extension])


def label(path: Path | str, column: str | None = None) -> dict[str, Any]:
    """A sample's ``label`` (its ``.cls``: an integer where it is one) and ``metadata`` (its ``.txt``,
    its ``.json`` parsed), as the inputs' records keep them (``column``: a table's, not a shard's)."""
    shard, sample = _sample(path)
    found: dict[str, Any] = {}
    if "cls" in sample.members:
        text = _read(shard, sample.members["cls"]).decode("utf-8", "replace").strip()
        found["label"] = int(text) if re.fullmatch(r"-?\d+", text) else text
    meta: dict[str, Any] = {}
    if "txt" in sample.members:
        meta["txt"] = _read(shard, sample.members["txt"]).decode("utf-8", "replace")
    if "json" in sample.members:
        try:
            meta["json"] = json.loads(_read(shard, sample.members["json"]))
        except ValueError:
            meta["json"] = _read(shard, sample.members["json"]).decode("utf-8", "replace")
    return found | ({"metadata": meta} if meta else {})


def whole_shards(paths: list[Path], index: int, count: int) -> tuple[int, int] | None:
    """The rows ``[start, end)`` of part ``index`` of ``count`` when the inputs are samples of at least
    ``count`` tar shards: whole shards each (part ``i`` takes shards ``n*i//count`` up to ``n*(i+1)//count``
    of the ``n``), so that a rank opens only its own files; None for other inputs."""
    if not paths or not all(is_part(p) for p in paths):
        return None
    starts = [i for i, p in enumerate(paths) if i == 0 or split(p)[0] != split(paths[i - 1])[0]]
    if len(starts) < count:
        return None
    bounds = [*starts, len(paths)]
    return bounds[len(starts) * index // count], bounds[len(starts) * (index + 1) // count]
