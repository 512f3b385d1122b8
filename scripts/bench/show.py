"""``hookdump show`` against the hand-written way (torch + torchvision's ``make_grid`` / ``save_image``), side
by side in one run, on the same ``.npy`` files (random ``(1, 64, 28, 28)`` maps), fresh processes, rounds
interleaved, medians (this machine is shared and noisy), peak RSS from ``/usr/bin/time -v``:

* ``torchvision, a process per PNG``: what ``show`` cost before it dropped torch (a script per file);
* ``torchvision, one process``: a hand-written loop over every file in one script (the fair peer);
* ``hookdump show, a call per PNG`` and ``hookdump show, one call`` (``show F1 F2 ... -o DIR``).

    .venv/bin/python scripts/bench_show.py [--files 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HAND = """
import sys
from pathlib import Path
import numpy as np
import torch
from torchvision.utils import make_grid, save_image
for name in sys.argv[2:]:
    maps = torch.from_numpy(np.load(name))[0].unsqueeze(1)
    low = maps.amin(dim=(1, 2, 3), keepdim=True)
    high = maps.amax(dim=(1, 2, 3), keepdim=True)
    grid = make_grid((maps - low) / (high - low).clamp_min(1e-12), nrow=8, padding=2)
    save_image(grid, Path(sys.argv[1]) / (Path(name).stem + ".png"))
"""


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{cmd[:3]} failed:\n{done.stderr[-2000:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return wall, (int(rss[1]) / 1024 if rss else float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    python, hookdump = str(ROOT / ".venv/bin/python"), str(ROOT / ".venv/bin/hookdump")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rng = np.random.default_rng(0)
        files = []
        for i in range(args.files):
            path = work / f"t{i:03d}.npy"
            np.save(path, rng.standard_normal((1, 64, 28, 28), dtype=np.float32))
            files.append(str(path))
        out = work / "png"
        out.mkdir()
        cases = {
            "torchvision, a process per PNG": [[python, "-c", HAND, str(out), f] for f in files],
            "torchvision, one process": [[python, "-c", HAND, str(out), *files]],
            "hookdump show, a call per PNG": [[hookdump, "show", f, "-o", str(out / "h.png")] for f in files],
            "hookdump show, one call": [[hookdump, "show", *files, "-o", str(out)]],
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for r in range(args.rounds):
            for name, commands in cases.items():
                runs = [timed(cmd) for cmd in commands]
                results[name].append((sum(w for w, _ in runs), max(m for _, m in runs)))
                print(f"  round {r + 1}/{args.rounds} {name}: {results[name][-1][0]:.1f}s", file=sys.stderr)
    base = statistics.median(w for w, _ in results["torchvision, one process"])
    print(f"{args.files} PNGs of (1, 64, 28, 28) maps, medians of {args.rounds} rounds")
    print(f"{'case':34} {'wall s':>8} {'x':>6} {'s/PNG':>7} {'peak RSS MB':>12}")
    for name, rows in results.items():
        wall = statistics.median(w for w, _ in rows)
        rss = statistics.median(m for _, m in rows)
        print(f"{name:34} {wall:8.2f} {wall / base:6.2f} {wall / args.files:7.2f} {rss:12.0f}")


if __name__ == "__main__":
    main()
