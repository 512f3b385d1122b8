"""Peak memory of a capture over a folder of images: hookdump (streams each batch to disk) against the
hand-written way (hooks append clones to a list, ``np.save`` of the concatenation at the end); with
``--formats``, also hookdump's peak memory per output format (npy, pt, safetensors) at two image counts.

Every case runs as a fresh process under ``/usr/bin/time -v``, the cases one after the other, several
rounds; the script prints the median peak RSS (and wall time) of each. The first table gives the ratio
hookdump / hand-written and the size of what was written; the second, for ``efficientnet_lite0`` capturing
``conv_stem`` over 256 and 512 images, how much the peak grows from the smaller count to the larger one:
about the same small amount for every format, since ``.pt`` and ``.safetensors`` are streamed from the
``.npy`` on disk rather than built in memory. All files go to a temporary folder, removed at the end.

    .venv/bin/python scripts/bench_memory.py [--images 192] [--rounds 3] [--compare-rounds N]
        [--formats] [--format-images 256,512]

``--compare-rounds 0`` skips the first table (``--formats --compare-rounds 0``: the formats table only).
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
FORMATS_MODEL = "efficientnet_lite0"
FORMATS_LAYER = "conv_stem"
FORMATS = ["npy", "pt", "safetensors"]

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
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.strip()}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024  # type: ignore[index]
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\d+):([\d.]+)", done.stderr)
    return rss, int(clock[1]) * 60 + float(clock[2])  # type: ignore[index]


def copy_images(root: Path, folder: Path, count: int) -> Path:
    """``count`` copies of the bundled photo (scikit-image's ``chelsea``) in a new ``folder``."""
    folder.mkdir()
    for i in range(count):
        shutil.copy(root / "hookdump" / "data" / "sample.jpg", folder / f"img{i:04d}.jpg")
    return folder


def mb_in(folder: Path) -> float:
    """Size in MB of the files in ``folder``."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 2**20


def compare(root: Path, work: Path, hookdump: str, count: int, rounds: int) -> None:
    """The first table: hookdump against hooks that keep every output in memory, on ``MODEL``."""
    images = copy_images(root, work / "images", count)
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
    for _ in range(rounds):
        for name, cmd in cases.items():
            results[name].append(measure(cmd))
    written = sum(p.stat().st_size for p in (work / "out").glob("*.npy")) / 2**20
    print(f"{MODEL}, {len(LAYERS)} layers, {count} images, batch 16, {rounds} rounds; "
          f"{written:.0f} MB of .npy written")  # fmt: skip
    print(f"{'case':<32}{'peak RSS MB':>12}{'wall s':>9}")
    for name, values in results.items():
        rss, wall = statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)
        print(f"{name:<32}{rss:>12.0f}{wall:>9.1f}")
    ours, hand = (statistics.median(v[0] for v in values) for values in results.values())
    print(f"peak RSS ratio hookdump / hand-written: {ours / hand:.2f}")
    for path in (images, work / "out", work / "hand-out"):
        shutil.rmtree(path)


def formats(root: Path, work: Path, hookdump: str, counts: tuple[int, int], rounds: int) -> None:
    """The second table: peak RSS of ``--format F`` at two image counts, and how much it grows."""
    folders = {count: copy_images(root, work / f"images-{count}", count) for count in counts}
    rss: dict[tuple[str, int], list[float]] = {(f, c): [] for f in FORMATS for c in counts}
    written: dict[tuple[str, int], float] = {}
    for _ in range(rounds):
        for fmt in FORMATS:
            for count in counts:
                out = work / f"out-{fmt}-{count}"
                shutil.rmtree(out, ignore_errors=True)
                cmd = [hookdump, "capture", "-m", FORMATS_MODEL, "-l", FORMATS_LAYER, str(folders[count]),
                       "-o", str(out), "--format", fmt, "-q"]  # fmt: skip
                rss[fmt, count].append(measure(cmd)[0])
                written[fmt, count] = mb_in(out)
                shutil.rmtree(out)
    small, large = counts
    print(f"{FORMATS_MODEL} -l {FORMATS_LAYER}, {small} and {large} images, batch 16, {rounds} rounds; "
          f"median peak RSS")  # fmt: skip
    head = f"{'format':<13}{f'peak RSS {small}':>14}{f'peak RSS {large}':>14}{'growth MB':>11}"
    print(f"{head}{f'MB written {small}':>16}{f'MB written {large}':>16}")
    growth = {}
    for fmt in FORMATS:
        low, high = statistics.median(rss[fmt, small]), statistics.median(rss[fmt, large])
        growth[fmt] = high - low
        row = f"{fmt:<13}{low:>14.0f}{high:>14.0f}{high - low:>+11.0f}"
        print(f"{row}{written[fmt, small]:>16.0f}{written[fmt, large]:>16.0f}")
    extra = written["npy", large] - written["npy", small]
    print(
        f"the {large - small} more images add {extra:.0f} MB of data; growth / that: "
        + ", ".join(f"{fmt} {growth[fmt] / extra:.2f}" for fmt in FORMATS)
    )
    for folder in folders.values():
        shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--images", type=int, default=192, help="images of the hookdump/hand-written table")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each table")
    parser.add_argument("--compare-rounds", type=int, help="rounds of the first table only (0: skip it)")
    parser.add_argument("--formats", action="store_true", help="also the npy/pt/safetensors table")
    parser.add_argument("--format-images", default="256,512", help="the two image counts of that table")
    args = parser.parse_args()
    small, large = (int(n) for n in args.format_images.split(","))
    compare_rounds = args.rounds if args.compare_rounds is None else args.compare_rounds
    root = Path(__file__).resolve().parent.parent
    hookdump = str(Path(sys.executable).with_name("hookdump"))
    work = Path(tempfile.mkdtemp(prefix="hookdump-mem-"))
    try:
        if compare_rounds > 0:
            compare(root, work, hookdump, args.images, compare_rounds)
        if args.formats:
            if compare_rounds > 0:
                print()
            formats(root, work, hookdump, (small, large), args.rounds)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
