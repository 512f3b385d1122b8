"""Peak memory of a capture over a folder of images: hookdump (streams each batch to disk) against the
hand-written way (the baseline: hooks append clones to a list, ``np.save`` of the concatenation at the
end); with ``--formats``, hookdump's peak memory per output format (npy, pt, safetensors) at several image
counts.

Every case runs as a fresh process, the cases one after the other, several rounds; medians. The first
table gives the ratio hookdump / hand-written (``x RSS``) and the size of what was written (copies of the
bundled photo). The second, for ``efficientnet_lite0`` capturing ``conv_stem`` (batch 16) over
scikit-image's RGB and grayscale photos cycled to each count, gives the peak at each count against the
smallest count's (the last row's ``x RSS``: the largest count's over the smallest's): flat, since each
batch's copies are streamed to disk, ``.pt`` and ``.safetensors`` are made from the ``.npy`` on disk, and
the console script gives malloc's free memory back after each batch. ``--resnet`` adds resnet50
``layer1``..``layer4`` (batch 32, npy) at its counts. ``--settings`` runs every row with the malloc setting
before issue 23 too (``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``: the heap kept, no trim;
hookdump leaves malloc's own variables as they are) and with glibc's defaults (``MALLOC_MMAP_MAX_=65536``).
``--speed N``: resnet50 ``layer1``..``layer4`` over N photos under the three settings, interleaved, medians
of ``--rounds`` (wall, CPU, page faults, ratios to hookdump's setting). All files go to a temporary folder,
removed at the end. ``--quick``: 8 images, one round.

    .venv/bin/python scripts/bench/memory.py [--images 192] [--rounds 3] [--compare-rounds N]
        [--formats] [--format-images 512,1024,2048,4096,8192] [--resnet 512,2048] [--settings]
        [--speed 256] [--queue 128 --queue-rows resnet50,twins --queue-bounds default,0,1000000]
        [--against DIR] [--queue-hand]

``--queue N``: issue 46's table (``queue``): resnet50 ``layer1``..``layer4`` and twins_svt_large's 28 layers
over N photos, hookdump under each ``--queue-bounds`` against the same-settings bare forward.

``--against DIR``: that table's hookdump cases run by another checkout too, as the rows before a change
(``git worktree add /tmp/before HEAD``, then ``--against /tmp/before``). ``--queue-hand``: a row of
hand-written hooks too (clones, each batch appended to ``.npy`` files after its forward, hookdump's process
settings): what writing the same layers costs without hookdump.

``--compare-rounds 0`` skips the first table (``--formats --compare-rounds 0``: the formats table only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import harness
from photos import copies, photos

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
RSS_RATIO = harness.Column("x RSS", "rss", ratio=True)

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


def measure(
    cmd: list[object], out: Path, setting: str = "hookdump", against: str | None = None
) -> harness.Run:
    """One fresh process under a malloc ``setting`` (none of the caller's own malloc variables); ``against``:
    ``hookdump`` from that checkout (``python -m hookdump``, the folder first on ``PYTHONPATH``)."""
    env: dict[str, str | None] = {**dict.fromkeys(MALLOC_VARIABLES), **SETTINGS[setting]}
    if against is not None:
        cmd, env["PYTHONPATH"] = [sys.executable, "-m", "hookdump", *cmd[1:]], against
    return harness.process(cmd, env, out=out)


def capture(model: str, layers: list[str], images: Path, out: Path, *args: object) -> list[object]:
    layer_args = [x for layer in layers for x in ("-l", layer)]
    return [harness.HOOKDUMP, "capture", "-m", model, *layer_args, images, "-o", out, "-q", *args]


def compare(work: Path, count: int, rounds: int) -> None:
    """The first table: hookdump against hooks that keep every output in memory, on ``MODEL``."""
    images = copies(work / "images", count)
    hand = work / "hand-out"
    script = HAND_WRITTEN.format(model=MODEL, layers=LAYERS)
    written: list[float] = []

    def hookdump() -> harness.Run:
        out = work / "out"
        run = harness.process(capture(MODEL, LAYERS, images, out, "--overwrite"))
        written.append(sum(p.stat().st_size for p in out.glob("*.npy")) / 2**20)
        return run

    def hand_written() -> harness.Run:
        hand.mkdir(exist_ok=True)  # its files replaced each round
        return harness.process([sys.executable, "-c", script, images, hand])

    cases = {"hookdump capture": hookdump, "hand-written hooks + np.save": hand_written}
    results = harness.rounds(cases, rounds)
    title = f"{MODEL}, {len(LAYERS)} layers, {count} images, batch 16; {written[-1]:.0f} MB of .npy written"
    harness.table(title, results, "hand-written hooks + np.save", [RSS_RATIO])


def formats(work: Path, rows: list[tuple[str, int, list[int]]], settings: list[str], rounds: int) -> None:
    """The second table, one a row and setting: peak RSS at every count against the smallest count's."""
    counts = sorted({n for _, _, row in rows for n in row})
    folders = {n: photos(work / f"images-{n}", n) for n in counts}
    cases = {}
    for setting in settings:
        for fmt, batch, row in rows:
            model, layers = (RESNET, STAGES) if batch == 32 else (FORMATS_MODEL, [FORMATS_LAYER])
            for n in row:
                cmd = capture(model, layers, folders[n], work / "out", "--format", fmt, "--batch-size", batch)
                cases[setting, f"{model} {fmt}", n] = lambda cmd=cmd, s=setting: measure(cmd, work / "out", s)
    results = harness.rounds({f"{s}, {r}, {n} images": case for (s, r, n), case in cases.items()}, rounds)
    harness.say(f"scikit-image's photos cycled; {FORMATS_MODEL} -l {FORMATS_LAYER} batch 16, {RESNET} -l"
                f" {','.join(STAGES)} batch 32")  # fmt: skip
    for setting in settings:
        for fmt, batch, row in rows:
            name = f"{RESNET if batch == 32 else FORMATS_MODEL} {fmt}"
            mine = {f"{n} images": results[f"{setting}, {name}, {n} images"] for n in row}
            harness.table(f"{setting}, {name}", mine, f"{min(row)} images", [RSS_RATIO])


def speed(work: Path, count: int, rounds: int) -> None:
    """resnet50's four stages over ``count`` photos under each malloc setting, interleaved; medians."""
    images = photos(work / "images-speed", count)
    cmd = capture(RESNET, STAGES, images, work / "out", "--batch-size", "32")
    cases = {name: lambda name=name: measure(cmd, work / "out", name) for name in SETTINGS}
    columns = [harness.Column("x cpu", "cpu", ratio=True), harness.Column("faults", "faults", digits=0)]
    title = f"{RESNET} -l {','.join(STAGES)}, {count} photos, batch 32, under each malloc setting"
    harness.table(title, harness.rounds(cases, rounds), "hookdump", columns)


LOOPS = str(Path(__file__).with_name("loops.py"))
QUEUE_ROWS = {  # the issue 46 rows: a model and its layers (for hookdump's -l and the bare script's names)
    "resnet50": (RESNET, STAGES),
    "twins": ("twins_svt_large", ["pos_block.*.proj.0", "blocks.*.*"]),
}
UNBOUNDED = "1000000"  # MB: no bound in bytes, the queue's depth alone (as before issue 46)


def queue(
    work: Path,
    count: int,
    rows: list[str],
    bounds: list[str],
    rounds: int,
    against: str | None = None,
    hand: bool = False,
) -> None:
    """Issue 46's table, a row a model: peak RSS and wall time of hookdump under each ``--max-queue-mb``
    (``default``: 1/256 of the available memory) against the bare forward with hookdump's own process
    settings (``loops.py`` ``bare+``: decode, forward, malloc_trim after each batch; no hooks, nothing
    saved), batch 32, fresh processes in turn; medians. ``against``: each bound run by that checkout's
    hookdump too (``git worktree add DIR COMMIT``), as the row before a change; ``hand``: a row of
    hand-written hooks writing the same layers (``loops.py`` ``hand+``), what the same work costs without
    hookdump."""
    images = photos(work / f"images-{count}", count)
    columns = [RSS_RATIO, harness.Column("x cpu", "cpu", ratio=True)]
    for row in rows:
        model, layers = QUEUE_ROWS[row]
        cases = {"bare forward, hookdump's settings": lambda m=model: harness.process(
            harness.me(LOOPS, "bare+", m, images, work / "bare", 32))}  # fmt: skip
        if hand:  # the peer: hooks that clone, each batch appended to .npy files after its forward
            cases["hand-written hooks, hookdump's settings"] = lambda m=model, ls=layers: harness.process(
                harness.me(LOOPS, "hand+", m, images, work / "hand", 32, *ls), out=work / "hand"
            )
        for bound in bounds:
            extra = [] if bound == "default" else ["--max-queue-mb", bound]
            name = "hookdump, no byte bound" if bound == UNBOUNDED else f"hookdump --max-queue-mb {bound}"
            cmd = capture(model, layers, images, work / "out", "--batch-size", 32, "--overwrite", *extra)
            cases[name] = lambda cmd=cmd: measure(cmd, work / "out")
            if against is not None:
                cases[f"{name}, at {against}"] = lambda cmd=cmd: measure(cmd, work / "out", against=against)
        results = harness.rounds(cases, rounds, alternate=True)
        title = (
            f"{model} -l {','.join(layers)}, {count} photos, batch 32 (issue 46: RSS <= 1.10x, wall <= 1.05x)"
        )
        harness.table(title, results, "bare forward, hookdump's settings", columns)


def main() -> None:
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--images", type=int, default=192, help="images of the hookdump/hand-written table")
    options.add_argument("--compare-rounds", type=int, help="rounds of the first table only (0: skip it)")
    options.add_argument("--formats", action="store_true", help="also the npy/pt/safetensors table")
    options.add_argument(
        "--format-images", default="512,1024,2048,4096,8192", help="the counts of that table"
    )
    options.add_argument("--resnet", default="", help="counts of resnet50 rows in that table (e.g. 512,2048)")
    options.add_argument(
        "--settings", action="store_true", help="that table under the other malloc settings too"
    )
    options.add_argument("--speed", type=int, default=0, help="photos of the speed table (0: skip it)")
    options.add_argument("--queue", type=int, default=0, help="photos of the writer-queue table (0: skip it)")
    options.add_argument("--queue-rows", default="resnet50,twins", help="its rows: resnet50, twins")
    options.add_argument("--queue-bounds", default=f"default,0,{UNBOUNDED}", help="its --max-queue-mb values")
    options.add_argument("--queue-hand", action="store_true", help="its rows with hand-written hooks too")
    options.add_argument("--against", help="its hookdump from this checkout too (a git worktree of a commit)")
    args: argparse.Namespace = harness.parse(options, quick={"images": 8, "rounds": 1})
    counts = [int(n) for n in args.format_images.split(",")]
    rows = [(fmt, 16, counts) for fmt in FORMATS] if args.formats else []
    rows += [("npy", 32, [int(n) for n in args.resnet.split(",")])] if args.resnet else []
    compare_rounds = args.rounds if args.compare_rounds is None else args.compare_rounds
    if args.against:
        harness.bytecode(Path(args.against))  # as parse did for this checkout: compiled once, not each run
    with harness.workdir("hookdump-mem-") as work:
        if compare_rounds > 0:
            compare(work, args.images, compare_rounds)
        if rows:
            formats(work, rows, list(SETTINGS) if args.settings else ["hookdump"], args.rounds)
        if args.speed:
            speed(work, args.speed, args.rounds)
        if args.queue:
            bounds = args.queue_bounds.split(",")
            queue_rows = args.queue_rows.split(",")
            queue(work, args.queue, queue_rows, bounds, args.rounds, args.against, args.queue_hand)


if __name__ == "__main__":
    main()
