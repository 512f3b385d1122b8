"""Capture cost side by side, in one process: hookdump's early stop against a full forward and its peers.

Captures ``pos_block.0.proj.0`` (an early layer) of ``twins_svt_large`` on a batch of images and times,
interleaved round by round (medians, this machine is shared and noisy):

* ``full forward``: the plain model, no hooks (the baseline);
* ``hand hook``: a hand-written forward hook that clones, with a full forward (what people write);
* ``timm stop_early``: timm's own ``forward_intermediates(indices=[0], stop_early=True)`` (stage 0 output);
* ``hookdump early stop``: hookdump's recorder as ``capture`` runs it (stops after the wanted layer);
* ``hookdump full``: the same with ``--no-early-stop``.

Then the whole command, end to end, with and without ``--no-early-stop`` (median of a few runs).

    .venv/bin/python scripts/bench_capture.py [--rounds 7] [--batch 8]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import timm
import torch

from hookdump.capture.recorder import Recorder
from hookdump.model import inventory, layers
from hookdump.model.sources.timm import create as models

MODEL, LAYER = "twins_svt_large", "pos_block.0.proj.0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--cli-runs", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = timm.create_model(MODEL).eval()
    x = torch.randn(args.batch, 3, 224, 224)
    found = inventory.take(lambda: models.build(MODEL, meta=True), lambda: model, (3, 224, 224))
    targets = layers.resolve([LAYER], found, MODEL)
    calls = {m.name: m.calls or 1 for m in found.modules}
    module = dict(model.named_modules())[LAYER]

    def full() -> None:
        model(x)

    def hand() -> None:
        kept = []
        handle = module.register_forward_hook(lambda m, a, o: kept.append(o.detach().clone()))
        try:
            model(x)
        finally:
            handle.remove()

    def timm_stop() -> None:
        model.forward_intermediates(x, indices=[0], intermediates_only=True, stop_early=True)

    def recorder(early: bool) -> Callable[[], None]:
        def run() -> None:
            with Recorder(model, targets, expected_calls=calls if early else None) as rec:
                rec.run(x, MODEL)

        return run

    cases = {
        "full forward": full,
        "hand hook": hand,
        "timm stop_early": timm_stop,
        "hookdump early stop": recorder(True),
        "hookdump full": recorder(False),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with torch.no_grad():
        for fn in cases.values():
            fn()  # warm up
        for _ in range(args.rounds):
            for name, fn in cases.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["full forward"])
    print(f"{MODEL}, capture {LAYER}, batch {args.batch}x3x224x224, {args.rounds} rounds, torch threads "
          f"{torch.get_num_threads()}")  # fmt: skip
    print(f"{'case':<22}{'median s':>10}{'x full forward':>16}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<22}{median:>10.3f}{median / base:>16.2f}")
    end_to_end(args.cli_runs)


def end_to_end(runs: int) -> None:
    exe = str(Path(sys.executable).with_name("hookdump"))
    sample_dir = Path(__file__).resolve().parent.parent / "hookdump" / "data"
    result: dict[str, list[float]] = {"early stop": [], "--no-early-stop": []}
    for _ in range(runs):
        for name, extra in (("early stop", []), ("--no-early-stop", ["--no-early-stop"])):
            cmd = [exe, "capture", "-m", MODEL, "-l", LAYER, str(sample_dir), "-o", "/tmp/hookdump-bench",
                   "--overwrite", "-q", *extra]  # fmt: skip
            start = time.perf_counter()
            subprocess.run(cmd, check=True)
            result[name].append(time.perf_counter() - start)
    early, full = (statistics.median(v) for v in result.values())
    print(f"end to end (hookdump capture, one photo, median of {runs}): early stop {early:.2f}s, "
          f"--no-early-stop {full:.2f}s, ratio {early / full:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
