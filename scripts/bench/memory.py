"""Peak memory of a capture over a folder of images: hookdump (streams each batch to disk) against the
hand-written way (hooks append clones to a list, ``np.save`` of the concatenation at the end); with
``--formats``, hookdump's peak memory per output format (npy, pt, safetensors) at several image counts.

Every case runs as a fresh process under ``/usr/bin/time -v``, the cases one after the other, several
rounds; the script prints the median peak RSS (and wall time) of each. The first table gives the ratio
hookdump / hand-written and the size of what was written (copies of the bundled photo). The second, for
``efficientnet_lite0`` capturing ``conv_stem`` (batch 16) over scikit-image's RGB and grayscale photos
cycled to each count, gives the peak at each count and the ratio of the largest count's to the smallest's:
flat, since each batch's copies are streamed to disk, ``.pt`` and ``.safetensors`` are made from the
``.npy`` on disk, and the console script gives malloc's free memory back after each batch. ``--resnet``
adds resnet50 ``layer1``..``layer4`` (batch 32, npy) at its counts. ``--settings`` runs every row with
the malloc setting before issue 23 too (``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``: the
heap kept, no trim; hookdump leaves malloc's own variables as they are) and with glibc's defaults
(``MALLOC_MMAP_MAX_=65536``). ``--speed N``: resnet50 ``layer1``..``layer4`` over N photos under the three
settings, interleaved, medians of ``--rounds`` (wall, CPU, page faults, ratios to hookdump's setting).
All files go to a temporary folder, removed at the end.

    .venv/bin/python scripts/bench_memory.py [--images 192] [--rounds 3] [--compare-rounds N]
        [--formats] [--format-images 512,1024,2048,4096,8192] [--resnet 512,2048] [--settings]
        [--speed 256]

``--compare-rounds 0`` skips the first table (``--formats --compare-rounds 0``: the formats table only).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_dataset import photos  # the same photo folders (scripts/ is on sys.path when run as a file)

MODEL = "twins_svt_small"
LAYERS = ["pos_block.0.proj.0", "blocks.0.0", "blocks.0.1"]
FORMATS_MODEL = "efficientnet_lite0"
FORMATS_LAYER = "conv_stem"
FORMATS = ["npy", "pt", "safetensors"]
RESNET, STAGES = "resnet50", ["layer1", "layer2", "layer3", "layer4"]
#: malloc settings by environment (hookdump leaves malloc as it is when one of its variables is set)
SETTINGS = {
    "hookdump": {},
    "before issue 23": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "2147483647"},
    "glibc defaults": {"MALLOC_MMAP_MAX_": "65536"},
}
MALLOC_VARIABLES = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                    "GLIBC_TUNABLES")  # fmt: skip
Run = tuple[float, float, float, int]  # peak RSS MB, wall s, cpu s (user + sys), minor page faults

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


def measure(cmd: list[str], env: dict[str, str] | None = None) -> Run:
    """Peak RSS in MB, wall and CPU seconds and minor page faults of one command, from /usr/bin/time -v;
    ``env``: malloc's variables for it (none of the caller's own)."""
    environ = {k: v for k, v in os.environ.items() if k not in MALLOC_VARIABLES} | (env or {})
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=environ)
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.strip()}")

    def field(name: str) -> str:
        return re.search(rf"{name}: ([\d.:]+)", done.stderr)[1]  # type: ignore[index]

    minutes, _, seconds = field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)").rpartition(":")
    cpu = float(field(r"User time \(seconds\)")) + float(field(r"System time \(seconds\)"))
    rss = int(field(r"Maximum resident set size \(kbytes\)")) / 1024
    return (
        rss,
        int(minutes or 0) * 60 + float(seconds),
        cpu,
        int(field(r"Minor \(reclaiming a frame\) page faults")),
    )


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
    results: dict[str, list[Run]] = {name: [] for name in cases}
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


def capture(hookdump: str, model: str, layers: list[str], images: Path, out: Path, *args: str) -> list[str]:
    layer_args = [x for layer in layers for x in ("-l", layer)]
    return [hookdump, "capture", "-m", model, *layer_args, str(images), "-o", str(out), "-q", *args]


def formats(work: Path, hookdump: str, rows: list[tuple[str, int, list[int]]], settings: list[str],
            rounds: int) -> None:  # fmt: skip
    """The second table: peak RSS of each (format, batch, counts) row under each setting, every count."""
    counts = sorted({n for _, _, row in rows for n in row})
    folders = {n: photos(work / f"images-{n}", n) for n in counts}
    rss: dict[tuple[str, str, int], list[float]] = {}
    for r in range(rounds):
        for setting in settings:
            for fmt, batch, row in rows:
                model, layers = (RESNET, STAGES) if batch == 32 else (FORMATS_MODEL, [FORMATS_LAYER])
                for n in row:
                    out = work / "out"
                    shutil.rmtree(out, ignore_errors=True)
                    cmd = capture(
                        hookdump, model, layers, folders[n], out, "--format", fmt, "--batch-size", str(batch)
                    )
                    run = measure(cmd, SETTINGS[setting])
                    rss.setdefault((setting, f"{model} {fmt}", n), []).append(run[0])
                    shutil.rmtree(out)
                    done = f"{n} images: {run[0]:.0f} MB, {run[1]:.0f} s"
                    print(f"  round {r + 1}: {setting}, {model} {fmt}, {done}", file=sys.stderr)
    print(f"peak RSS MB (median of {rounds} fresh processes), scikit-image's photos cycled;")
    print(f"{FORMATS_MODEL} -l {FORMATS_LAYER} batch 16, {RESNET} -l {','.join(STAGES)} batch 32")
    print(f"{'setting':<17}{'row':<30}" + "".join(f"{n:>8}" for n in counts) + f"{'largest / smallest':>20}")
    for setting in settings:
        for fmt, batch, row in rows:
            name = f"{RESNET if batch == 32 else FORMATS_MODEL} {fmt}"
            peaks = {n: statistics.median(rss[setting, name, n]) for n in row}
            cells = "".join(f"{peaks[n]:>8.0f}" if n in peaks else f"{'-':>8}" for n in counts)
            print(f"{setting:<17}{name:<30}{cells}{peaks[max(row)] / peaks[min(row)]:>20.2f}")
    for folder in folders.values():
        shutil.rmtree(folder)


def speed(work: Path, hookdump: str, count: int, rounds: int) -> None:
    """resnet50's four stages over ``count`` photos under each malloc setting, interleaved; medians."""
    images = photos(work / "images-speed", count)
    runs: dict[str, list[Run]] = {name: [] for name in SETTINGS}
    for _ in range(rounds):
        for name, env in SETTINGS.items():
            out = work / "out"
            runs[name].append(
                measure(capture(hookdump, RESNET, STAGES, images, out, "--batch-size", "32"), env)
            )
            shutil.rmtree(out)
    print(f"{RESNET} -l {','.join(STAGES)}, {count} photos, batch 32, medians of {rounds} interleaved")
    print(f"{'setting':<17}{'wall s':>8}{'x':>6}{'cpu s':>8}{'x':>6}{'faults':>10}{'peak RSS MB':>12}")
    base = [statistics.median(r[i] for r in runs["hookdump"]) for i in range(4)]
    for name, values in runs.items():
        rss, wall, cpu, faults = (statistics.median(r[i] for r in values) for i in range(4))
        ratios = f"{wall:>8.1f}{wall / base[1]:>6.2f}{cpu:>8.1f}{cpu / base[2]:>6.2f}"
        print(f"{name:<17}{ratios}{faults:>10.0f}{rss:>12.0f}")
    shutil.rmtree(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--images", type=int, default=192, help="images of the hookdump/hand-written table")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each table")
    parser.add_argument("--compare-rounds", type=int, help="rounds of the first table only (0: skip it)")
    parser.add_argument("--formats", action="store_true", help="also the npy/pt/safetensors table")
    parser.add_argument("--format-images", default="512,1024,2048,4096,8192", help="the counts of that table")
    parser.add_argument("--resnet", default="", help="counts of resnet50 rows in that table (e.g. 512,2048)")
    parser.add_argument(
        "--settings", action="store_true", help="that table under the other malloc settings too"
    )
    parser.add_argument("--speed", type=int, default=0, help="photos of the speed table (0: skip it)")
    args = parser.parse_args()
    counts = [int(n) for n in args.format_images.split(",")]
    rows = [(fmt, 16, counts) for fmt in FORMATS] if args.formats else []
    rows += [("npy", 32, [int(n) for n in args.resnet.split(",")])] if args.resnet else []
    compare_rounds = args.rounds if args.compare_rounds is None else args.compare_rounds
    root = Path(__file__).resolve().parent.parent
    hookdump = str(Path(sys.executable).with_name("hookdump"))
    work = Path(tempfile.mkdtemp(prefix="hookdump-mem-"))
    try:
        if compare_rounds > 0:
            compare(root, work, hookdump, args.images, compare_rounds)
            print()
        if rows:
            formats(work, hookdump, rows, list(SETTINGS) if args.settings else ["hookdump"], args.rounds)
            print()
        if args.speed:
            speed(work, hookdump, args.speed, args.rounds)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
