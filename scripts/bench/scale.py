"""Issue 22's scale run (long, not for CI): resnet50 ``layer4 --reduce mean`` and ``layer3`` full maps in
float16 over SMALL and LARGE photos (default 1,000 and 10,000, scikit-image's photos and their mirror
images cycled), fresh processes: the large run's wall time against LARGE / SMALL times the small run's
(goal <= 1.1), its peak RSS against the small run's (goal <= 1.10), and the large ``layer3`` run killed
(SIGKILL) after the checkpoint at 60% of its batches, ``--resume``d, and its files compared byte for byte
with the uninterrupted run's. ``--rounds 3`` runs the small size three times (``--large-rounds``, the
large one; medians compared), ``--cases layer4`` one of the two runs. ``--quick``: 8 and 16 photos,
batch 4.

    .venv/bin/python scripts/bench/scale.py [--images 1000,10000] [--rounds 1] [--large-rounds 1]
        [--cases layer4,layer3] [--batch 32]
"""

from __future__ import annotations

import argparse
import math
import shutil
from pathlib import Path

import harness
from photos import mirrored

RESNET = "resnet50"
RUNS = {"layer4 --reduce mean": ["-l", "layer4", "--reduce", "mean"],
        "layer3 float16": ["-l", "layer3", "--save-dtype", "float16"]}  # fmt: skip


def resumed(capture: list[object], out: Path, work: Path, batches: int) -> str:
    """The note of ``capture`` SIGKILLed after the checkpoint at 60% of its batches, then ``--resume``d, its
    files against those of the uninterrupted run in ``out``."""
    again = work / "scale-resumed"
    cmd = [*capture, "-o", again, "--quiet"]
    killed = harness.process(
        cmd, {"HOOKDUMP_TEST_KILL_AT": f"checkpoint-{math.ceil(0.6 * batches)}"}, ok=(-9,)
    )
    harness.process([*cmd, "--resume"], check=True)
    same = all((again / f.name).read_bytes() == f.read_bytes() for f in sorted(out.glob("*.npy")))
    shutil.rmtree(again, ignore_errors=True)
    said = "exit -9" if not math.isnan(killed.wall) else "not killed"
    return f"killed at 60% ({said}), --resume: files byte-identical to the uninterrupted run: {same}"


def one(label: str, args: argparse.Namespace, folders: dict[int, Path], work: Path) -> None:
    """One of ``RUNS``: each size's runs, then the ratios against the goals (and the resume check)."""
    (small, large), out = folders, work / "scale-out"
    results: harness.Results = {}
    notes = []
    for count, rounds in ((small, args.rounds), (large, args.large_rounds)):
        capture = [harness.HOOKDUMP, "capture", "-m", RESNET, *RUNS[label], folders[count], "--batch-size",
                   args.batch]  # fmt: skip

        def fresh(cmd: list[object] = capture) -> harness.Run:  # its files kept until the next run
            shutil.rmtree(out, ignore_errors=True)
            return harness.process([*cmd, "-o", out, "--quiet"])

        results.update(harness.rounds({f"{count:,} photos": fresh}, rounds))
        if count == large and label == "layer3 float16":
            notes.append(resumed(capture, out, work, math.ceil(large / args.batch)))
        shutil.rmtree(out, ignore_errors=True)
    first, second = results
    wall = harness.ratio(results, second, first) / (large / small)
    rss = harness.ratio(results, second, first, "rss")
    verdicts = ["met" if ratio <= limit else "MISSED" for ratio, limit in ((wall, 1.1), (rss, 1.10))]
    notes.insert(0, f"wall / ({large // small} x small) {wall:.2f} (goal <= 1.1: {verdicts[0]}), peak RSS"
                 f" ratio {rss:.2f} (goal <= 1.10: {verdicts[1]})")  # fmt: skip
    title = f"{RESNET} {label}, batch {args.batch}"
    harness.table(title, results, first, [harness.Column("x RSS", "rss", ratio=True)], notes, digits=0)


def main() -> None:
    options = harness.parser(__doc__, rounds=1)
    options.add_argument("--images", default="1000,10000", help="SMALL,LARGE photos")
    options.add_argument("--large-rounds", type=int, default=1, help="runs of LARGE (--rounds: of SMALL)")
    options.add_argument("--cases", default="layer4,layer3", help="the runs: layer4, layer3")
    options.add_argument("--batch", type=int, default=32)
    args = harness.parse(options, quick={"images": "8,16", "batch": 4})
    small, large = (int(x) for x in args.images.split(","))
    with harness.workdir("hookdump-scale-") as work:
        folders = {count: mirrored(work / f"scale-{count}", count) for count in (small, large)}
        harness.say(f"scale: {RESNET}, batch {args.batch}, {small:,} and {large:,} photos (scikit-image's,"
                    " cycled and mirrored)")  # fmt: skip
        for label in RUNS:
            if label.split()[0] in args.cases.split(","):
                one(label, args, folders, work)


if __name__ == "__main__":
    main()
