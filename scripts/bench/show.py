"""``hookdump show`` against the hand-written way (torch + torchvision's ``make_grid`` / ``save_image``), side
by side in one run, on the same ``.npy`` files (random ``(1, 64, 28, 28)`` maps), fresh processes, rounds
interleaved, medians (this machine is shared and noisy):

* ``torchvision, a process per PNG``: what ``show`` cost before it dropped torch (a script per file);
* ``torchvision, one process``: a hand-written loop over every file in one script (the fair peer, the
  baseline);
* ``hookdump show, a call per PNG`` and ``hookdump show, one call`` (``show F1 F2 ... -o DIR``).

A case of several processes counts their wall and CPU time added, and the largest peak RSS.
``--quick``: two files.

    .venv/bin/python scripts/bench/show.py [--files 16] [--rounds 3]
"""

from __future__ import annotations

import sys

import harness

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


def main() -> None:
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--files", type=int, default=16)
    args = harness.parse(options, quick={"files": 2})
    import numpy as np

    python, hookdump = sys.executable, harness.HOOKDUMP
    with harness.workdir("hookdump-bench-show-") as work:
        rng = np.random.default_rng(0)
        files = []
        for i in range(args.files):
            path = work / f"t{i:03d}.npy"
            np.save(path, rng.standard_normal((1, 64, 28, 28), dtype=np.float32))
            files.append(str(path))
        out = [work / f"png{i}" for i in range(4)]  # a folder a case: show replaces only its own files
        for folder in out:
            folder.mkdir()
        commands = {
            "torchvision, a process per PNG": [[python, "-c", HAND, out[0], f] for f in files],
            "torchvision, one process": [[python, "-c", HAND, out[1], *files]],
            "hookdump show, a call per PNG": [[hookdump, "show", f, "-o", out[2] / "h.png"] for f in files],
            "hookdump show, one call": [[hookdump, "show", *files, "-o", out[3]]],
        }
        cases = {
            name: lambda cmds=cmds: harness.chain([harness.process(cmd) for cmd in cmds])
            for name, cmds in commands.items()
        }
        results = harness.rounds(cases, args.rounds)
    per_png = harness.Column("s/PNG", "wall", per=args.files)
    title = f"{args.files} PNGs of (1, 64, 28, 28) maps"
    harness.table(title, results, "torchvision, one process", [per_png])


if __name__ == "__main__":
    main()
