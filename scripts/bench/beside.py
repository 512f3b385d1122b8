"""What work beside the forward pass costs it: twins_svt_large, one batch of 32, timed in one process while
a second thread runs (in a loop, the whole forward long) one of: ``sleep`` (nothing: the baseline),
``stats`` (hookdump's ``stats.Accumulator`` over 320 MB of float32), ``stream`` (only copying those arrays
piece by piece into float64), ``python`` (a pure Python loop, holding the GIL). hookdump's process
settings (malloc, OpenMP) as the console script sets them. Two rounds interleaved by default.
``--quick``: twins_svt_small, a batch of 2, a tenth of the data.

    .venv/bin/python scripts/bench/beside.py [sleep stats stream python] [--rounds 2] [--batch 32]
"""

from __future__ import annotations

import os
import threading
import time

import harness

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # as hookdump's own process; before torch loads libgomp

from hookdump.cli import process

KINDS = ["sleep", "stats", "stream", "python"]


def main() -> None:
    options = harness.parser(__doc__, rounds=2)
    options.add_argument("kinds", nargs="*", default=KINDS, help="of: " + ", ".join(KINDS))
    options.add_argument("--batch", type=int, default=32)
    options.add_argument("--model", default="twins_svt_large")
    options.add_argument("--data", type=float, default=1.0, help="the share of the 320 MB beside it")
    args = harness.parse(options, quick={"batch": 2, "model": "twins_svt_small", "data": 0.1})
    process.keep_freed_memory()
    import numpy as np
    import timm
    import torch

    from hookdump.store.formats.stats import PIECE, Accumulator

    torch.manual_seed(0)
    model = timm.create_model(args.model).eval()
    batch = torch.randn(args.batch, 3, 224, 224)
    rows = max(1, round(32 * args.data))
    data = [np.random.default_rng(i).standard_normal((rows, 401408 // (1 + i % 4)), dtype=np.float32)
            for i in range(12)]  # fmt: skip
    stop = threading.Event()

    def beside(kind: str) -> None:
        n = 0
        while not stop.is_set():
            for d in data:
                if stop.is_set():
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

    def forward_beside(kind: str) -> harness.Run:
        stop.clear()
        thread = threading.Thread(target=beside, args=(kind,), daemon=True)
        thread.start()
        with torch.inference_mode():
            run = harness.timed(lambda: model(batch))
        stop.set()
        thread.join()
        process.give_back()
        return run

    forward_beside("sleep")  # warm-up
    results = harness.rounds(
        {kind: lambda kind=kind: forward_beside(kind) for kind in args.kinds}, args.rounds
    )
    megabytes = sum(d.nbytes for d in data) / 1e6
    title = f"{args.model}, a batch of {args.batch}, {megabytes:.0f} MB beside the forward"
    harness.table(title, results, "sleep" if "sleep" in results else next(iter(results)))


if __name__ == "__main__":
    main()
