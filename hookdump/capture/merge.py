"""``hookdump merge``: the folders of ``capture --shard I/N`` (all N, each once, of one run) joined into the
capture one process would have written (torchrun's rank 0 merges its ranks' folders the same way)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError, UsageError
from ..inputs.files import skipped_note
from ..store.folder import outdir, remote, zarrjoin
from ..store.folder.captured import Captured, key_from_json
from ..store.folder.commit import owned
from ..store.folder.lease import Lease
from ..store.folder.lock import check_free
from ..store.folder.manifest import MANIFEST, entry_stem
from ..store.folder.reader import Capture, read_manifest
from ..store.folder.remoteread import local
from ..store.folder.saved import Adopted, SavedTensor
from ..store.folder.writer import Writer
from ..store.formats.zarr import ZARR_STORE
from ..units import parse_size
from ..urls import is_url

MERGE_CHUNK_ROWS = 256
SKIP_NOTE = "--skip-bad left out "


@dataclass
class MergeResult:
    """What ``merge`` wrote."""

    out: Path | str  # a URL for a merge published to object storage
    manifest: Path
    shards: int
    rows: int
    tensors: list[SavedTensor]


def merge_to(shards: list[str], out: str, overwrite: bool = False) -> MergeResult:
    """``merge`` of shard folders named by paths or URLs (a URL read from its local copy) into ``out``, a
    folder or a URL (merged into its mirror, then published, manifest last, under its lease)."""
    dirs = [local(s) for s in shards]
    if not is_url(out):
        return merge(dirs, Path(out), overwrite=overwrite)
    remote.check(out, overwrite, resume=False)
    folder = remote.mirror(out)
    merged = merge(dirs, folder, overwrite=True)  # the mirror is hookdump's own
    with Lease(out):
        kept = remote.publish_kept(folder, out)
    return dataclasses.replace(merged, out=out, manifest=kept)


def merge(
    shard_dirs: list[Path], out: Path, overwrite: bool = False, joined: Joined | None = None
) -> MergeResult:
    """Join the folders of ``capture --shard I/N`` (all N, each once, of one run) into ``out``, as one
    process would have written it; ``joined``: their rows already in the store ``tensors.zarr`` becomes
    (torchrun's ranks wrote their own); else this process writes each part's rows into it."""
    manifests = [_shard_manifest(d) for d in shard_dirs]
    _check_complete_set(shard_dirs, manifests)
    order = sorted(range(len(manifests)), key=lambda i: manifests[i]["shard"]["index"])
    captures = [Capture(shard_dirs[i]) for i in order]
    first = captures[0].manifest
    entries = captures[0].entries  # one manifest entry per tensor, whatever formats hold it
    for capture in captures[1:]:
        if set(capture.entries) != set(entries):
            raise InputError(
                f"`{capture.path}` holds other tensors than `{captures[0].path}`.",
                "Shards of one run hold the same layers; capture the shards again with one command.",
            )
    options = first["options"]
    formats = tuple(options["format"].split(","))
    _check_out(out, shard_dirs, sorted({str(e["layer"]) for e in entries.values()}), formats, overwrite)
    shard_bytes = None
    if options.get("shard_size"):
        shard_bytes = parse_size(options["shard_size"])
    streamed = tuple(f for f in formats if f != "zarr")  # tensors.zarr is joined from the parts' stores
    with Writer(out, streamed, "keep", overwrite, shard_bytes=shard_bytes, command="merge") as writer:
        for capture in captures if streamed else []:
            for stem, entry in entries.items():
                _append(writer, entry, capture[stem])
        records = [_captured(stem, entry, captures) for stem, entry in entries.items()] if streamed else []
        header = _merged_header(first, captures, shard_dirs, out)
        adopted = None
        if "zarr" in formats:
            places = [(stem, f) for stem in entries for f in formats]  # the manifest's order
            adopted = _joined_zarr(captures, writer.scratch, zarr_rows(options), places, joined)
        saved = writer.commit(records, header, adopted)
    return MergeResult(out, out / MANIFEST, len(captures), len(header["inputs"]), saved)


@dataclass
class Joined:
    """The store ``tensors.zarr`` of a run whose parts wrote their rows into it (``zarrjoin.write_part``),
    and their stats (an ``Accumulator`` state per array, per part)."""

    store: Path
    states: list[list[dict[str, Any]]]


def zarr_rows(options: dict[str, Any]) -> int:
    """The inputs in a chunk of a run's ``tensors.zarr`` (its manifest's ``options``)."""
    return int(options.get("zarr_chunk") or options["batch_size"])


def _joined_zarr(
    captures: list[Capture], scratch: Path, rows: int, order: list[tuple[str, str]], joined: Joined | None
) -> Adopted:
    """``tensors.zarr`` of the parts joined in ``scratch`` (their rows written here, unless ``joined`` holds
    them), with each array's manifest entry: a part's, for the rows of all, with the stats of all."""
    join, store = zarrjoin.plan(captures, rows), scratch / ZARR_STORE
    if joined is None:
        zarrjoin.create(join, store, captures)
        states = [zarrjoin.write_part(join, store, p, c) for p, c in enumerate(captures)]
    else:
        os.replace(joined.store, store)
        states = joined.states
    stats = zarrjoin.finish(join, store, captures, states)
    entries = {entry_stem(e): e for e in captures[0].manifest["tensors"] if e.get("format") == "zarr"}
    saved = []
    for stem, array, result in zip(join.stems, join.arrays, stats, strict=True):
        entry = {**entries[stem], "shape": list(array.shape), "stats": result}
        saved.append(SavedTensor(**{**entry, "modified_in_place_after_hook": _modified(stem, captures)}))
    return Adopted(saved, {ZARR_STORE: ZARR_STORE}, order)


def _check_out(
    out: Path, shards: list[Path], layers: list[str], formats: tuple[str, ...], overwrite: bool
) -> None:
    """Refuse, before any work, an ``out`` that merge may not write: one of the shards it reads, a folder
    that cannot be written, a capture there (without --overwrite), a user's file of a name it writes."""
    for folder in shards:
        if folder.resolve() == out.resolve():
            raise UsageError(
                f"--out `{out}` is one of the shards being merged: the merge would replace files it reads.",
                "Merge into a new folder: -o merged.",
            )
    check_free(out)
    outdir.check(out, overwrite, resume=False)
    outdir.in_the_way(out, layers, formats, owned(out), command="merge")


def _shard_manifest(folder: Path) -> dict[str, Any]:
    manifest = read_manifest(folder)
    if manifest is None or "shard" not in manifest:
        raise InputError(
            f"`{folder}` is not a shard of a capture (no manifest.json with a `shard` entry).",
            "Pass the --out folders of `hookdump capture --shard I/N`.",
        )
    if manifest.get("complete") is False:
        raise InputError(
            f"Shard `{folder}` is incomplete.", "Finish it first: rerun its command with --resume."
        )
    return manifest


def _check_complete_set(dirs: list[Path], manifests: list[dict[str, Any]]) -> None:
    runs = {m["shard"]["run"] for m in manifests}
    if len(runs) > 1:
        raise InputError(
            "These shards come from different runs (other options or inputs).",
            "Merge only the shards of one command, run with --shard 0/N ... N-1/N.",
        )
    count = manifests[0]["shard"]["count"]
    for folder, manifest in zip(dirs, manifests, strict=True):
        if manifest["shard"]["count"] != count:
            raise InputError(
                f"These shards split the inputs differently: `{dirs[0]}` is shard"
                f" {manifests[0]['shard']['index']}/{count}, `{folder}` is shard"
                f" {manifest['shard']['index']}/{manifest['shard']['count']}.",
                "Merge the folders of one split, all N of --shard 0/N ... N-1/N.",
            )
    seen: dict[int, Path] = {}
    for folder, manifest in zip(dirs, manifests, strict=True):
        index = manifest["shard"]["index"]
        if index in seen:
            raise InputError(
                f"Shard {index}/{count} is given twice: `{seen[index]}` and `{folder}`.",
                "Pass each shard once.",
            )
        seen[index] = folder
    missing = [f"{i}/{count}" for i in range(count) if i not in seen]
    if missing:
        raise InputError(f"Shards missing: {', '.join(missing)}.", "Capture them, then merge all N together.")


def _append(writer: Writer, entry: dict[str, Any], array: Any) -> None:
    key = key_from_json([entry["layer"], entry["kind"], entry["index"], entry["call"]])
    for start in range(0, int(array.shape[0]), MERGE_CHUNK_ROWS):
        rows = array[start : start + MERGE_CHUNK_ROWS]
        tensor = rows.clone() if isinstance(rows, torch.Tensor) else torch.from_numpy(rows.copy())
        writer.tensors.append({key: tensor})
    writer.tensors.source_dtypes[key] = getattr(torch, entry["source_dtype"])


def _captured(stem: str, entry: dict[str, Any], captures: list[Any]) -> Captured:
    """The record ``commit`` names files from: ``calls_per_forward`` only matters for the ``@k`` in names."""
    record = Captured(
        entry["layer"],
        entry["kind"],
        entry["index"],
        entry["call"],
        1,
        layout=entry.get("layout"),
        windows=entry.get("windows"),
        order=entry.get("order"),
    )
    if record.stem != stem:
        record.calls_per_forward = 2
    record.modified_in_place = _modified(stem, captures)
    return record


def _modified(stem: str, captures: list[Capture]) -> bool:
    """Whether a hook saw tensor ``stem`` changed in place after it in any part."""
    return any(
        e.get("modified_in_place_after_hook", False)
        for c in captures
        for e in c.manifest["tensors"]
        if entry_stem(e) == stem
    )


def _merged_header(
    first: dict[str, Any], captures: list[Capture], dirs: list[Path], out: Path
) -> dict[str, Any]:
    manifests = [c.manifest for c in captures]
    header = {k: v for k, v in first.items() if k not in ("tensors", "shard")}
    header["options"] = {**first["options"], "out": str(out), "shard": None}
    header["inputs"] = [record for c in captures for record in c.inputs]  # (a table's too)
    header["skipped"] = [record for m in manifests for record in m.get("skipped", [])]
    header["stopped_early"] = any(m.get("stopped_early") for m in manifests)
    if first.get("grad"):
        header["grad"] = {**first["grad"], "classes": [c for m in manifests for c in m["grad"]["classes"]]}
    notes = [n for m in manifests for n in m.get("notes", []) if not n.startswith(SKIP_NOTE)]
    if header["skipped"]:  # one note for all, not one per shard
        notes.append(skipped_note(header["skipped"]))
    header["notes"] = [*dict.fromkeys(notes), f"merged from {len(manifests)} shards"]
    header["merged_from"] = [str(d) for d in dirs]
    return header
