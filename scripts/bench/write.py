"""Writing a capture's streams past the page cache (``O_DIRECT``, hookdump's default for ``.npy``) against
writing them through it: the bytes of resnet50's ``layer1``..``layer4`` over 256 photos (8 batches of 32,
1.5 GB of float32), appended by hookdump's own ``NpyStream``, each run a fresh process, rounds interleaved,
medians of wall time and of the process's user and kernel CPU (``getrusage``; this machine is shared and
noisy: read the ratios). Only the writing is timed; the batches are made before the clock starts.

    .venv/bin/python scripts/bench_write.py [--rounds 5] [--dir FOLDER_ON_THE_DISK_TO_MEASURE]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STAGES = {"layer1": (256, 56, 56), "layer2": (512, 28, 28), "layer3": (1024, 14, 14), "layer4": (2048, 7, 7)}
BATCH, BATCHES = 32, 8


def write(folder: Path, direct: bool) -> dict[str, float]:
    """One run: every stage's stream, batch after batch, as a capture appends them."""
    import torch

    from hookdump.store.formats.npystream import NpyStream

    batches = {name: torch.randn(BATCH, *shape) for name, shape in STAGES.items()}
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    streams = [NpyStream(folder / f"{name}.npy", name, direct) for name in STAGES]
    for _ in range(BATCHES):
        for stream, tensor in zip(streams, batches.values(), strict=True):
            stream.append(tensor)
    for stream in streams:
        stream.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall": time.perf_counter() - start,
        "user": after.ru_utime - before.ru_utime,
        "kernel": after.ru_stime - before.ru_stime,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--child", choices=["direct", "cached"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(write(args.dir, args.child == "direct")))
        return
    results: dict[str, list[dict[str, float]]] = {"cached": [], "direct": []}
    for r in range(args.rounds):
        for case in results:
            folder = Path(tempfile.mkdtemp(prefix="hookdump-bench-write-", dir=args.dir))
            try:
                child = [sys.executable, __file__, "--child", case, "--dir", str(folder)]
                run = json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout)
            finally:
                shutil.rmtree(folder)
            results[case].append(run)
            print(f"  round {r + 1}/{args.rounds} {case}: {run['wall']:.2f}s, kernel {run['kernel']:.2f}s")
    gb = sum(BATCH * BATCHES * 4 * a * b * c for a, b, c in STAGES.values()) / 1e9
    print(f"{gb:.2f} GB in {BATCHES} batches, medians of {args.rounds} rounds")
    print(f"{'case':8} {'wall s':>7} {'user s':>7} {'kernel s':>9}")
    med = {
        case: {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        for case, runs in results.items()
    }
    for case, m in med.items():
        print(f"{case:8} {m['wall']:7.2f} {m['user']:7.2f} {m['kernel']:9.2f}")
    for k in ("wall", "kernel"):
        print(f"direct / cached, {k}: {med['direct'][k] / med['cached'][k]:.2f}")


if __name__ == "__main__":
    main()
