"""Decoding beside the forward pass or before it: ``api.capture`` with one decoding worker (the default on a
2-core machine) and with ``workers=0`` (decoded in the main thread, as a bare loop does), against a bare loop
(model built, decode, transform, forward under ``inference_mode``), in one process with the console
script's process settings, in interleaved rounds; medians and each round's wall time.

    .venv/bin/python scripts/bench_workers.py [--images 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_dataset import photos  # the same cycled photos as the dataset benchmark (scripts/ is on sys.path)

from hookdump.cli import process

STAGES = ["layer1", "layer2", "layer3", "layer4"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    process.keep_freed_memory()
    process.short_spin()  # before torch is imported, as the console script does
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    from hookdump import api

    work = Path(tempfile.mkdtemp(prefix="hookdump-workers-"))
    folder = photos(work / "images", args.images)
    paths = sorted(folder.iterdir())

    def bare() -> None:
        torch.manual_seed(0)
        model = timm.create_model("resnet50").eval()
        transform = create_transform(**resolve_data_config({}, model=model), is_training=False)
        with torch.inference_mode():
            for start in range(0, len(paths), 32):
                batch = [transform(Image.open(p).convert("RGB")) for p in paths[start : start + 32]]
                model(torch.stack(batch))
                process.give_back()

    def hookdump(workers: int) -> None:
        api.capture([str(folder)], STAGES, model="resnet50", out=work / "out", overwrite=True, batch_size=32,
                    workers=workers, on_batch=process.trimmed(lambda *_: None))  # fmt: skip

    cases = {"bare": bare, "workers=1": lambda: hookdump(1), "workers=0": lambda: hookdump(0)}
    walls: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for _ in range(args.rounds):
            for name, case in cases.items():
                start = time.perf_counter()
                case()
                walls[name].append(time.perf_counter() - start)
    finally:
        shutil.rmtree(work)
    base = statistics.median(walls["bare"])
    print(f"resnet50 {', '.join(STAGES)}, {args.images} photos, batch 32, {args.rounds} rounds")
    for name, values in walls.items():
        median = statistics.median(values)
        rounds = [round(v, 1) for v in values]
        print(f"{name:10} median {median:6.2f} s  x bare {median / base:.3f}  rounds {rounds}")


if __name__ == "__main__":
    main()
