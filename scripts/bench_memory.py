"""Peak memory of a capture over a folder of images: hookdump (streams each batch to disk) against the
hand-written way (hooks append clones to a list, ``np.save`` of the concatenation at the end).

Both run as fresh processes under ``/usr/bin/time -v``, one after the other, several rounds; the script
prints the median peak RSS and wall time of each, the ratio, and the size of what was written.

    .venv/bin/python scripts/bench_memory.py [--images 192] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODEL = "twins_svt_small"
LAYERS = ["pos_block.0.proj.0", "blocks.0.0", "blocks.0.1"]

HAND_WRITTEN = """
import sys, numpy as np, timm, torch
from pathlib import Path
from PIL import Image
from timm.data import create_transform, resolve_data_config
model = timm.create_model({model!r}).eval()
transform = create_transform(**resolve_data_config({{}}, model=model), is_training=False)
paths = sorted(Path(sys.argv[1]).iterdir())
kept = {{name: [] for name in {layers!r}}}
modules = dict(model.named_modules())
handles = [modules[n].register_forward_hook(lambda m, a, o, n=n: kept[n].append(o.detach().clone()))
           for n in kept]
with torch.no_grad():
    for i in range(0, len(paths), 16):
        model(torch.stack([transform(Image.open(p).convert("RGB")) for p in paths[i:i + 16]]))
for n, parts in kept.items():
    np.save(Path(sys.argv[2]) / f"{{n}}.npy", torch.cat(parts).numpy())
"""


def measure(cmd: list[str]) -> tuple[float, float]:
    """Peak RSS in MB and wall seconds of one command, from /usr/bin/time -v."""
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=True)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024  # type: ignore[index]
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\d+):([\d.]+)", done.stderr)
    return rss, int(clock[1]) * 60 + float(clock[2])  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=192)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    work = Path(tempfile.mkdtemp(prefix="hookdump-mem-"))
    images = work / "images"
    images.mkdir()
    for i in range(args.images):
        shutil.copy(root / "hookdump" / "data" / "sample.jpg", images / f"img{i:04d}.jpg")
    hookdump = str(Path(sys.executable).with_name("hookdump"))
    layer_args = [x for layer in LAYERS for x in ("-l", layer)]
    script = work / "hand.py"
    script.write_text(HAND_WRITTEN.format(model=MODEL, layers=LAYERS))
    (work / "hand-out").mkdir()
    cases = {
        "hookdump capture": [
            hookdump,
            "capture",
            "-m",
            MODEL,
            *layer_args,
            str(images),
            "-o",
            str(work / "out"),
            "--overwrite",
            "-q",
        ],
        "hand-written hooks + np.save": [sys.executable, str(script), str(images), str(work / "hand-out")],
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, cmd in cases.items():
            results[name].append(measure(cmd))
    written = sum(p.stat().st_size for p in (work / "out").glob("*.npy")) / 2**20
    print(f"{MODEL}, {len(LAYERS)} layers, {args.images} images, batch 16, {args.rounds} rounds; "
          f"{written:.0f} MB of .npy written")  # fmt: skip
    print(f"{'case':<32}{'peak RSS MB':>12}{'wall s':>9}")
    for name, values in results.items():
        rss, wall = statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)
        print(f"{name:<32}{rss:>12.0f}{wall:>9.1f}")
    ours, hand = (statistics.median(v[0] for v in values) for values in results.values())
    print(f"peak RSS ratio hookdump / hand-written: {ours / hand:.2f}")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
