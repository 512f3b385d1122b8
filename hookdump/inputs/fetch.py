"""Inputs behind URLs (``s3://bucket/train-{000..009}.tar``, ``gs://bucket/photos/*.jpg``, a Parquet file on
the hub, an ``@list`` whose lines are URLs): each fetched whole into a local cache as the preflight first
needs it, many at a time, and kept there while the object's size and ETag stay the same, so that every
reader of an input (a shard's index, a table's row groups, the decoding workers) reads a local file at
local speed. An input keeps its URL as its name wherever it is named (the manifest, ``inputs.parquet``,
messages, ``--resume``'s checks): ``shown`` turns a cached path back into it.

The cache is ``$HOOKDUMP_CACHE/inputs`` (default ``~/.cache/hookdump/inputs``), a folder a URL's scheme and
bucket, the object's key below it; delete it at any time."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import urllib.parse
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..urls import cache, call, filesystem, given, is_url, scheme
from .shards import braces
from .walk import IMAGE_SUFFIXES

_SAFE = "/._-~@+,=!$'()*"  # kept as they are in a cached file's name; anything else is %-quoted


_prefetched: dict[str, Future[list[Path]]] = {}


def cache_root() -> Path:
    """Where fetched inputs are kept (``$HOOKDUMP_CACHE/inputs``)."""
    return cache() / "inputs"


def cached(url: str) -> Path:
    """The local file a URL's object is fetched to."""
    parsed = urllib.parse.urlsplit(url)
    key = urllib.parse.quote(parsed.path.lstrip("/"), safe=_SAFE)
    return cache_root() / scheme(url) / urllib.parse.quote(parsed.netloc, safe=_SAFE) / key


def shown(path: Path | str) -> str:
    """An input's name as the user gave it: the URL of a fetched input (``SHARD::KEY`` and ``FILE::ROW``
    addresses keep their key), else the path itself. Cheap for a local path (a prefix test)."""
    text = str(path)
    root = str(cache_root()) + os.sep
    if not text.startswith(root):
        return text
    name, bucket, key = [*text[len(root) :].split(os.sep, 2), "", ""][:3]
    return f"{name}://{urllib.parse.unquote(bucket)}/{urllib.parse.unquote(key)}"


def local(name: str) -> str:
    """The inverse of ``shown`` for a name that is a URL (``s3://b/x.tar::k`` -> the cached address), as
    ``--resume`` reads a journal back; any other name as it is."""
    if not is_url(name):
        return name
    url, sep, key = name.partition("::")
    return f"{cached(url)}{sep}{key}"


def prefetch(texts: list[str], options: dict[str, Any]) -> None:
    """Start listing and fetching the inputs among ``texts`` that are URLs, on a daemon thread, while torch
    imports and the model is built (``options``: the storage options in force); ``expand_fetched`` takes
    what it fetched. A failure is kept for then: the preflight says it where it would."""
    urls_given = [t for t in texts if is_url(t) and not t.startswith("@")]
    if not urls_given:
        return

    def work() -> None:
        with given(options):
            for text in urls_given:
                future: Future[list[Path]] = _prefetched.setdefault(text, Future())
                try:
                    future.set_result(fetch([o for o in expand(text) if _input(o[0])]))
                except BaseException as exc:  # handed to the preflight
                    future.set_exception(exc)

    for text in urls_given:
        _prefetched.setdefault(text, Future())
    threading.Thread(target=work, name="hookdump-fetch", daemon=True).start()


def _input(name: str) -> bool:
    """Whether an object is one the inputs take (an image, a tar shard, a table), by its name."""
    return name.lower().endswith((*IMAGE_SUFFIXES, ".tar", ".parquet", ".arrow"))


def settle() -> None:
    """Wait for what ``prefetch`` started (before any fork: no thread of the fetch runs in a child)."""
    for future in list(_prefetched.values()):
        with contextlib.suppress(BaseException):
            future.result()


def listed(text: str) -> list[tuple[str, dict[str, Any] | None]]:
    """``expand(text)``, once what ``prefetch`` started for it is done (its copies are then in the cache)."""
    future = _prefetched.pop(text, None)
    if future is not None:
        with contextlib.suppress(BaseException):  # (a failure is met again, and said, by what follows)
            future.result()
    return expand(text)


def current(name: str) -> Path:
    """The cached address of an input named by its URL (``s3://b/x.tar::k``), fetched again first when the
    object changed since (one look at it per object and process)."""
    url, sep, key = name.partition("::")
    return Path(f"{_fetched(url)}{sep}{key}")


@functools.lru_cache(maxsize=4096)
def _fetched(url: str) -> Path:
    return fetch(expand(url))[0]


def expand(text: str, wanted: str = "input") -> list[tuple[str, dict[str, Any] | None]]:
    """The objects a URL names, in order, each with what the listing said of it (None when it was named
    alone): its brace ranges (``{000..009}``), then a glob (``*``, ``?``, ``[``) or a prefix (a folder: every
    object under it), else the one object. Nothing there is an InputError naming the URL."""
    found: list[tuple[str, dict[str, Any] | None]] = []
    for url in braces(text):
        fs, path = filesystem(url)
        prefix = url[: len(url) - len(path)] if url.endswith(path) else f"{scheme(url)}://"
        if set(path) & set("*?["):
            listed = call(url, functools.partial(fs.glob, path, detail=True), what="list")
            files = sorted((p, d) for p, d in listed.items() if d.get("type") != "directory")
            if not files:
                raise InputError(f"The pattern `{url}` matches no {wanted}.", "Check the pattern (quote it).")
            found += [(prefix + p, d) for p, d in files]
            continue
        info = call(url, functools.partial(_info, fs, path), what="read")
        if info is None:
            bucket = path.split("/", 1)[0]
            if not call(url, functools.partial(fs.exists, bucket), what="read"):
                raise InputError(
                    f"Input `{url}`: its bucket `{bucket}` does not exist.",
                    "Check the bucket's name, and the endpoint (AWS_ENDPOINT_URL, --storage-option"
                    " endpoint_url).",
                )
            raise InputError(
                f"Input `{url}` does not exist.", "Check the URL (and --storage-option endpoint_url)."
            )
        if info.get("type") == "directory":
            listed = call(url, functools.partial(fs.find, path, detail=True), what="list")
            found += [(prefix + p, d) for p, d in sorted(listed.items())]
        else:
            found.append((url, info))
    return found


def fetch(objects: list[tuple[str, dict[str, Any] | None]]) -> list[Path]:
    """Each object's local copy, fetched (many at a time) unless the cache holds it already with the same
    size and ETag; in order."""
    paths, missing = [], []
    for url, info in objects:
        path = cached(url)
        paths.append(path)
        if info is None:
            fs, key = filesystem(url)
            info = call(url, functools.partial(fs.info, key), what="read")
        if _stamp(path) != _key(info):
            missing.append((url, path, info))
    by_system: dict[int, tuple[Any, list[tuple[str, Path, dict[str, Any]]]]] = {}
    for item in missing:
        fs, _ = filesystem(item[0])
        by_system.setdefault(id(fs), (fs, []))[1].append(item)
    for fs, items in by_system.values():
        _get(fs, items)
    return paths


def _get(fs: Any, items: list[tuple[str, Path, dict[str, Any]]]) -> None:
    """Fetch ``items`` (url, local path, listing) with one call (fsspec runs them side by side), each to a
    name beside its place and renamed in once whole, then stamped."""
    for _, path, _ in items:
        path.parent.mkdir(parents=True, exist_ok=True)
    remote = [fs._strip_protocol(url) for url, _, _ in items]
    partial = [str(path) + f".part-{os.getpid()}" for _, path, _ in items]
    first = items[0][0] if len(items) == 1 else f"{items[0][0]} (and {len(items) - 1} more)"
    try:
        call(first, lambda: fs.get(remote, partial), what="read")
        for (_, path, info), part in zip(items, partial, strict=True):
            if os.path.getsize(part) != int(info.get("size") or 0):
                raise InputError(
                    f"`{shown(path)}` came back as {os.path.getsize(part):,} bytes, not the"
                    f" {info.get('size'):,}"
                    " its listing says: the object changed while it was read, or the transfer broke.",
                    "Run the same command again.",
                )
            os.replace(part, path)
            stamp = _stamp_file(path)
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps(_key(info)))
    finally:
        for part in partial:
            Path(part).unlink(missing_ok=True)


def _info(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = fs.info(path)
    except FileNotFoundError:
        return None
    return info


def _key(info: dict[str, Any]) -> list[Any]:
    """What says an object is the one cached: its size and ETag (or its modification time)."""
    return [int(info.get("size") or 0), str(info.get("ETag") or info.get("etag") or info.get("mtime") or "")]


def _stamp_file(path: Path) -> Path:
    """Where the cache says what a cached file is (beside the cache, never in a cached folder, which a
    capture read from a bucket is)."""
    return cache_root().with_name("stamps") / f"{path.relative_to(cache_root())}.json"


def _stamp(path: Path) -> list[Any] | None:
    """The ``_key`` of the cached copy, when it is there whole."""
    try:
        stamp = json.loads(_stamp_file(path).read_text())
    except (OSError, ValueError):
        return None
    return stamp if path.is_file() and path.stat().st_size == stamp[0] else None
