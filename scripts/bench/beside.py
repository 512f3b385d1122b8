"""What work beside the forward pass costs it: twins_svt_large, one batch of 32, timed in one process while
a second thread runs (in a loop, the whole forward long) one of: ``sleep`` (nothing), ``stats``
(hookdump's ``stats.Accumulator`` over 320 MB of float32), ``stream`` (only copying those arrays piece by
piece into float64), ``python`` (a pure Python loop, holding the GIL). hookdump's process settings
(malloc, OpenMP) as the console script sets them. Prints each kind's seconds, two rounds interleaved.

    .venv/bin/python scripts/bench_beside.py sleep stats stream python
"""

from __future__ import annotations

import os
import sys
import threading
import time

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # as hookdump's own process; before torch loads libgomp

from hookdump.cli import process

process.keep_freed_memory()

import numpy as np  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402

from hookdump.store.formats.stats import PIECE, Accumulator  # noqa: E402

torch.manual_seed(0)
MODEL = timm.create_model("twins_svt_large").eval()
BATCH = torch.randn(32, 3, 224, 224)
DATA = [
    np.random.default_rng(i).standard_normal((32, 401408 // (1 + i % 4)), dtype=np.float32) for i in range(12)
]
STOP = threading.Event()


def beside(kind: str) -> None:
    n = 0
    while not STOP.is_set():
        for d in DATA:
            if STOP.is_set():
                break
            if kind == "stats":
                Accumulator().update(d)
            elif kind == "stream":
                wide = np.empty((d.shape[0], PIECE))
                for s in range(0, d.shape[1], PIECE):
                    piece = d[:, s : s + PIECE]
                    np.copyto(wide[:, : piece.shape[1]], piece)
            elif kind == "python":
                for _ in range(200000):
                    n += 1
            else:
                time.sleep(0.01)


def forward_beside(kind: str) -> float:
    STOP.clear()
    thread = threading.Thread(target=beside, args=(kind,), daemon=True)
    thread.start()
    began = time.perf_counter()
    with torch.inference_mode():
        MODEL(BATCH)
    seconds = time.perf_counter() - began
    STOP.set()
    thread.join()
    process.give_back()
    return seconds


def main() -> None:
    kinds = sys.argv[1:] or ["sleep", "stats", "stream", "python"]
    print(f"data beside the forward: {sum(d.nbytes for d in DATA) / 1e6:.0f} MB")
    forward_beside("sleep")  # warm-up
    found: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(2):
        for kind in kinds:
            found[kind].append(forward_beside(kind))
    for kind, seconds in found.items():
        print(f"{kind:8s} " + "  ".join(f"{s:.2f}s" for s in seconds))


if __name__ == "__main__":
    main()
