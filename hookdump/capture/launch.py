"""How a capture is launched: what it does before its plan, then the run in this one process, or under
``torchrun`` every rank's shard and rank 0's merge of them (``parallel``)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..store.folder import commit, profile, remote
from ..store.folder.lease import Lease
from ..store.folder.reader import finished_manifest
from . import parallel, preflight, run
from .options import CaptureOptions
from .results import CapturePlan, CaptureResult, from_manifest


def begin(options: CaptureOptions | None, option_values: dict[str, Any]) -> float:
    """Before a capture's plan: the profile started again, a --shard refused under torchrun, what a finished
    commit left in the folder cleaned. Returns when the capture started (``time.perf_counter``)."""
    started = time.perf_counter()
    profile.reset()  # (a capture before this one in the process)
    if parallel.world()[1] > 1:
        parallel.check_no_shard(option_values.get("shard", options.shard if options else None))
    commit.clean_finished(dataclasses.replace(options or CaptureOptions(), **option_values).folder)
    return started


def publish_pending(options: CaptureOptions | None, option_values: dict[str, Any]) -> CaptureResult | None:
    """``--resume`` of a capture into a URL that was finished but not all published (the network, a kill):
    its publish finished, its result; None for any other capture."""
    opts = dataclasses.replace(options or CaptureOptions(), **option_values)
    url, started = opts.url, time.perf_counter()
    if not (opts.resume and url is not None and remote.pending(opts.folder)):
        return None
    with Lease(url):
        result = _publish(url, opts.folder, started)
    result.notes.append(f"published the capture an earlier run finished into {url} (its upload had stopped)")
    return result


def capture(
    found: CapturePlan,
    layer_specs: list[str],
    started: float,
    on_batch: Callable[[int, int, int], None] | None,
) -> CaptureResult:
    """What ``found`` planned, captured in this process, or on torchrun's ranks (``on_batch``: see
    ``api.capture``; the ranks report no batch)."""
    url = found.published
    here = parallel.world()[0] == 0  # (under torchrun, rank 0 holds the lease and publishes)
    with Lease(url) if url is not None and here else contextlib.nullcontext():
        if parallel.world()[1] > 1:
            result = _on_ranks(found, layer_specs, started)
        else:
            result = run.run(found, layer_specs, started, on_batch)
        if url is None or not here:
            return result
        published = _publish(url, found.options.folder, started)
    published.notes[:0] = result.notes
    return published


def _publish(url: str, folder: Path, started: float) -> CaptureResult:
    """The finished capture in ``folder`` (the mirror) published to ``url``; its result, the manifest a
    local copy beside the mirror (which goes)."""
    result = from_manifest(folder, finished_manifest(folder), 0.0)
    with profile.span("publish"):
        kept = remote.publish_kept(folder, url)
    return dataclasses.replace(
        result, out=url, manifest=kept, notes=[], seconds=time.perf_counter() - started
    )


def _on_ranks(found: CapturePlan, layer_specs: list[str], started: float) -> CaptureResult:
    """Under torchrun: every rank captures its shard, rank 0 merges them into ``out`` (``parallel``)."""
    opts = found.options
    assert found.source is not None

    def run_shard(shard: str, folder: Path, device: str, resume: bool) -> None:
        rank_opts = dataclasses.replace(
            opts, shard=shard, out=folder, device=device, overwrite=not resume, resume=resume
        )
        rank_plan = preflight.plan(layer_specs, found.spec, found.source, rank_opts, decode=False)
        run.run(rank_plan, layer_specs, time.perf_counter(), None)

    shards = min(parallel.world()[1], -(-len(found.paths) // opts.batch_size))  # a rank without a batch idles
    merged = parallel.capture_on_ranks(run_shard, opts, max(shards, 1))
    data = finished_manifest(opts.folder)
    return from_manifest(opts.folder, data, time.perf_counter() - started, merged.tensors if merged else None)
