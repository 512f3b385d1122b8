"""Decoding beside the forward pass or before it: ``api.capture`` with one decoding worker (the default on a
2-core machine) and with ``workers=0`` (decoded in the main thread, as a bare loop does), against a bare loop
(the baseline: model built, decode, transform, forward under ``inference_mode``), in one process with the
console script's process settings, in interleaved rounds. ``--quick``: resnet18 over 8 photos.

    .venv/bin/python scripts/bench/workers.py [--images 128] [--rounds 5] [--model resnet50]
"""

from __future__ import annotations

import harness
from photos import photos

from hookdump.cli import process

STAGES = ["layer1", "layer2", "layer3", "layer4"]


def main() -> None:
    options = harness.parser(__doc__, rounds=5)
    options.add_argument("--images", type=int, default=128)
    options.add_argument("--model", default="resnet50")
    args = harness.parse(options, quick={"images": 8, "model": "resnet18"})
    process.keep_freed_memory()
    process.short_spin()  # before torch is imported, as the console script does
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    from hookdump import api

    with harness.workdir("hookdump-workers-") as work:
        folder = photos(work / "images", args.images)
        paths = sorted(folder.iterdir())

        def bare() -> None:
            torch.manual_seed(0)
            model = timm.create_model(args.model).eval()
            transform = create_transform(**resolve_data_config({}, model=model), is_training=False)
            with torch.inference_mode():
                for start in range(0, len(paths), 32):
                    batch = [transform(Image.open(p).convert("RGB")) for p in paths[start : start + 32]]
                    model(torch.stack(batch))
                    process.give_back()

        def hookdump(workers: int) -> None:
            on_batch = process.trimmed(lambda *_: None)
            api.capture([str(folder)], STAGES, model=args.model, out=work / "out", overwrite=True,
                        batch_size=32, workers=workers, on_batch=on_batch)  # fmt: skip

        cases = {"bare": bare, "workers=1": lambda: hookdump(1), "workers=0": lambda: hookdump(0)}
        results = harness.timings(cases, args.rounds, warm=False)
    title = f"{args.model} {', '.join(STAGES)}, {args.images} photos, batch 32, in one process"
    harness.table(title, results, "bare")


if __name__ == "__main__":
    main()
