"""Writing a capture's streams past the page cache (``O_DIRECT``, hookdump's default for ``.npy``) against
writing them through it (the baseline): the bytes of resnet50's ``layer1``..``layer4`` over 256 photos (8
batches of 32, 1.5 GB of float32), appended by hookdump's own ``NpyStream``, each run a fresh process, rounds
interleaved, medians of wall time and of the process's user and kernel CPU (``getrusage``; this machine is
shared and noisy: read the ratios). Only the writing is timed; the batches are made before the clock
starts. ``--quick``: one batch of 8 (48 MB).

    .venv/bin/python scripts/bench/write.py [--rounds 5] [--dir FOLDER_ON_THE_DISK_TO_MEASURE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import harness

STAGES = {"layer1": (256, 56, 56), "layer2": (512, 28, 28), "layer3": (1024, 14, 14), "layer4": (2048, 7, 7)}


def write(folder: Path, direct: bool, batch: int, batches: int) -> harness.Run:
    """One run: every stage's stream, batch after batch, as a capture appends them."""
    import torch

    from hookdump.store.formats.npystream import NpyStream

    tensors = {name: torch.randn(batch, *shape) for name, shape in STAGES.items()}

    def append() -> None:
        streams = [NpyStream(folder / f"{name}.npy", name, direct) for name in STAGES]
        for _ in range(batches):
            for stream, tensor in zip(streams, tensors.values(), strict=True):
                stream.append(tensor)
        for stream in streams:
            stream.close()

    return harness.timed(append)


def child(case: str, folder: Path, args: argparse.Namespace) -> harness.Run:
    """One run in a fresh process, in a new folder under ``folder``: the times it measured, its peak RSS."""
    where = Path(tempfile.mkdtemp(prefix="hookdump-bench-write-", dir=folder))
    try:
        cmd = harness.me(__file__, case, where, args.batch, args.batches)
        run = harness.process(cmd, check=True)
    finally:
        shutil.rmtree(where)
    said = json.loads(run.stdout)
    return harness.Run(said["wall"], said["user"], said["system"], rss=run.rss)


def main() -> None:
    if found := harness.worker():
        kind, (folder, batch, batches) = found
        run = write(Path(folder), kind == "direct", int(batch), int(batches))
        print(json.dumps({"wall": run.wall, "user": run.user, "system": run.system}))
        return
    options = harness.parser(__doc__, rounds=5)
    options.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temporary folder)"
    )
    options.add_argument("--batch", type=int, default=32)
    options.add_argument("--batches", type=int, default=8)
    args = harness.parse(options, quick={"batch": 8, "batches": 1})
    cases = {case: lambda case=case: child(case, args.dir, args) for case in ("cached", "direct")}
    results = harness.rounds(cases, args.rounds)
    gb = sum(args.batch * args.batches * 4 * a * b * c for a, b, c in STAGES.values()) / 1e9
    columns = [harness.Column("user s", "user"), harness.Column("kernel s", "system"),
               harness.Column("x kernel", "system", ratio=True)]  # fmt: skip
    harness.table(f"{gb:.2f} GB in {args.batches} batches of {args.batch}", results, "cached", columns)


if __name__ == "__main__":
    main()
