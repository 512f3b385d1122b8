"""Run hookdump's inventory on the meta device over every timm architecture; report failures and a count.

    .venv/bin/python scripts/zoo_sweep.py                      # the whole zoo (timm.list_models())
    .venv/bin/python scripts/zoo_sweep.py --filter 'vit_*' --limit 50 --jobs 2 --timeout 120
    .venv/bin/python scripts/zoo_sweep.py --json sweep.json    # every result, for later reading

A model passes when it builds on meta (no weights) and one traced forward at its default input size runs
there with a hook on every module: exactly what `hookdump list-modules MODEL` does before it would fall back
to a real CPU pass. Each model runs in a worker process under a per-model timeout (SIGALRM).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import signal
import sys
import time
from typing import Any


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("timed out")


def check(args: tuple[str, int]) -> dict[str, Any]:
    """One architecture: build on meta, trace on meta. Never raises."""
    name, timeout = args
    from hookdump.inputs import transforms as inputs
    from hookdump.model import inventory
    from hookdump.model.sources.timm import create as models

    started = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    stage = "build"
    try:
        model = models.build(name, meta=True)
        stage = "trace"
        size = tuple(inputs.data_config(model, None)["input_size"])
        found = inventory.trace(model, size, "meta")
        fires = sum(1 for m in found.modules if m.fires)
        result = {"name": name, "ok": True, "modules": len(found.modules), "fires": fires}
    except BaseException as exc:  # every failure is a data point here
        text = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {text[0][:200] if text else ''}"
        result = {"name": name, "ok": False, "stage": stage, "reason": reason}
    finally:
        signal.alarm(0)
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--filter", default="", help="timm.list_models() filter, e.g. 'vit_*'")
    parser.add_argument("--limit", type=int, default=0, help="only the first N names (0: all)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per model")
    parser.add_argument("--json", dest="json_out", help="write every result to this file")
    opts = parser.parse_args()

    import timm

    names = timm.list_models(opts.filter) if opts.filter else timm.list_models()
    if opts.limit:
        names = names[: opts.limit]
    print(f"sweeping {len(names)} architectures (timm {timm.__version__}), {opts.jobs} jobs", flush=True)
    started = time.perf_counter()
    results = []
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(opts.jobs, maxtasksperchild=50) as pool:
        for i, result in enumerate(
            pool.imap_unordered(check, [(n, opts.timeout) for n in names], chunksize=1), 1
        ):
            results.append(result)
            if not result["ok"]:
                print(f"FAIL {result['name']} ({result['stage']}): {result['reason']}", flush=True)
            if i % 100 == 0:
                print(f"... {i}/{len(names)} done", flush=True)
    passed = sum(1 for r in results if r["ok"])
    print(f"\n{passed} of {len(results)} architectures pass on meta ({time.perf_counter() - started:.0f}s)")
    reasons = collections.Counter(r["reason"].split(":")[0] for r in results if not r["ok"])
    for kind, count in reasons.most_common():
        print(f"  {count:4d}  {kind}")
    slow = sorted(results, key=lambda r: -r["seconds"])[:5]
    print("slowest: " + ", ".join(f"{r['name']} {r['seconds']:.1f}s" for r in slow))
    if opts.json_out:
        with open(opts.json_out, "w") as f:
            json.dump(sorted(results, key=lambda r: r["name"]), f, indent=1)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
