"""Capture over a folder of photos, whole command against whole command: hookdump and what people write.

Every case is a fresh process (imports, model build with ``torch.manual_seed(0)`` as hookdump's
``--seed 0``, decode, timm's eval transform, forward, saving) timed end to end, with its peak RSS (of the
largest process: a DataLoader worker is not added) and cpu time (user + sys, worker processes included:
what contention moves least); the cases take turns round by round (this machine is shared and noisy: read
the ratios), and the script prints the median and fastest wall time. The photos are copies of
scikit-image's RGB and grayscale sample photos, cycled to ``--images``, in a temporary folder removed at
the end. What people write is in ``loops.py``.

* resnet50, ``layer1`` .. ``layer4``, batch 32: the bare forward (``inference_mode``, no hooks, nothing
  saved); a careful hand-written loop (forward hooks that clone, each batch appended to ``.npy`` files
  whose header already holds the final shape); torchlens (``torchlens.extract`` of the four modules, per
  batch, written the same way; left out, with a line, when torchlens is not installed); ``hookdump
  capture`` with its defaults.
* vit_small_patch16_224, every block's output reduced to its class token: bare, hand-written hooks keeping
  ``output[:, 0]``, and ``hookdump capture -l 'blocks.*' --reduce cls``.
* twins_svt_large from a seeded ``.safetensors`` checkpoint, ``pos_block.3.proj.0``, the bundled photo: the
  seed's script (``create_model``, ``load_state_dict(load_file(...))``, one hook, forward, ``np.save``)
  against ``hookdump capture --checkpoint``.
* issue 22's rows, each the bare forward, the same with hookdump's process settings and ``hookdump
  capture`` (goal: hookdump / the same-settings bare forward <= 1.05): ``vit-tokens`` (vit_small, every
  block, full tokens), ``twins-many`` (twins_svt_large ``pos_block.*.proj.0`` + ``blocks.*.*``,
  ``--images-twins`` photos), ``tv`` (torchvision's resnet50, ``tv:resnet50``, the four stages).
  ``--no-peers`` drops resnet's hand-written and torchlens rows. Under every table the script prints each
  row's breakdown (``HOOKDUMP_PROFILE``, ``hookdump/store/folder/profile.py``; the script's own cases write
  the same spans: setup, decode, forward): medians of the seconds in each span of the run, main thread and
  writer thread, and what the process spent outside the run (its start and imports, its exit).
* ``--memory``: hookdump's peak RSS on resnet50 at ``--images-large`` photos against ``--images`` (slow).
* "hookdump's settings": the bare forward (and the seed's script) run with what ``hookdump`` does to its
  own process (malloc keeps freed memory within a batch and gives it back after it, ``allocator``;
  OpenMP's idle threads spin less, ``openmp.short_spin``; no interpreter teardown at exit,
  ``shell.exit_now``), so that the hooks, copies and writing are measured alone.

``scale.py`` is issue 22's scale run (it was ``--scale``). ``--quick``: resnet and vit, 8 photos, batch 4,
one round.

    .venv/bin/python scripts/bench/dataset.py [--images 256] [--rounds 3] [--batch 32]
        [--cases resnet,vit,twins,vit-tokens,twins-many,tv] [--no-peers] [--images-twins 64]
        [--memory] [--images-large 2048] [--trees T1,T2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

import harness
from photos import photos

LOOPS = str(Path(__file__).with_name("loops.py"))
RESNET, STAGES = "resnet50", ["layer1", "layer2", "layer3", "layer4"]
VIT, VIT_DEPTH = "vit_small_patch16_224", 12
TWINS, TWINS_LAYER = "twins_svt_large", "pos_block.3.proj.0"
TV = "tv:resnet50"
Goal = tuple[str, str, str, float]  # a, b, "<=" or ">=", limit of a's median / b's
Cases = dict[str, tuple[list[str], Path]]  # case -> its command and the folder it writes
COLUMNS = [harness.Column("x min", "wall", min, ratio=True), harness.Column("x cpu", "cpu", ratio=True),
           harness.Column("own s", "own", digits=1)]  # fmt: skip
TREES: dict[str, str] = {}  # case -> the source tree its hookdump runs from (--trees)
MAIN = ("setup", "decode", "forward", "hooks", "copy", "reduce", "writer wait", "between batches",
        "writer drain", "commit")  # fmt: skip
WRITER = ("stats", "write", "checkpoint", "on_batch")


def run(cmd: list[str], out: Path, tree: str | None = None) -> harness.Run:
    """One case's run, its breakdown (``HOOKDUMP_PROFILE``) and the seconds hookdump reports (``own``)."""
    found = harness.process(cmd, {"PYTHONPATH": tree} if tree else None, profile=True, out=out)
    if own := re.search(r"wrote \d+ file\(s\).* in ([\d.]+)s on", found.stdout):
        found.figures["own"] = float(own[1])
    return found


def me(kind: str, *args: object) -> list[str]:
    return harness.me(LOOPS, kind, *args)


def hookdump(*args: object) -> list[str]:
    return [harness.HOOKDUMP, "capture", *map(str, args)]


def bench(title: str, cases: Cases, base: str, goals: list[Goal], rounds: int) -> harness.Results:
    """Every case once a round, its folder removed around each run; the table, its goals and breakdowns."""
    runners = {
        name: lambda c=cmd, o=out, n=name: run(c, o, TREES.get(n)) for name, (cmd, out) in cases.items()
    }
    results = harness.rounds(runners, rounds)
    notes = [harness.goal(results, *goal) for goal in goals if goal[0] in results and goal[1] in results]
    for name, runs in results.items():
        notes += breakdown(name, runs)
    harness.table(title, results, base, COLUMNS, notes, digits=1)
    return results


def breakdown(name: str, runs: list[harness.Run]) -> list[str]:
    """Medians over the rounds of where ``name``'s time went (``hookdump.store.folder.profile``): the main
    thread's spans (copy and reduce are part of hooks), the writer thread's (they overlap the forward), and
    what the process spent outside ``capture.run`` (imports, argument parsing, exit)."""
    profiles = [{**r.figures, "wall": r.wall} for r in runs if "run" in r.figures]
    if not profiles:
        return []

    def m(key: str) -> float:
        return statistics.median(p.get(key, 0.0) for p in profiles)

    wall, run_s = m("wall"), m("run")
    has = set().union(*profiles)
    main = "  ".join(f"{k} {m(k):.2f}" for k in MAIN if k in has)
    writer = "  ".join(f"{k} {m(k):.2f}" for k in WRITER if k in has)
    outside = f"outside the run {wall - run_s:.2f}"
    if "before run" in has:  # the process's start, imports and parsing; the rest is its exit
        before = m("before run")
        outside += f" (start and imports {before:.2f}, exit {wall - run_s - before:.2f})"
    lines = [f"  breakdown of {name} (s, medians of {len(profiles)}): wall {wall:.2f} = {outside}"
             f" + run {run_s:.2f}", f"    main thread: {main}"]  # fmt: skip
    return [*lines, f"    writer thread (overlaps the forward): {writer}"] if writer else lines


def resnet(args: argparse.Namespace, images: Path, work: Path) -> None:
    """resnet50, four stages: bare, hand-written, torchlens, hookdump; with ``--memory``, the large run."""
    n, stages = args.batch, [x for layer in STAGES for x in ("-l", layer)]
    cases = {
        "bare forward": (me("bare", RESNET, images, work / "o1", n), work / "o1"),
        "bare, hookdump's settings": (me("bare+", RESNET, images, work / "o0", n), work / "o0"),
        "hand-written hooks": (me("hand", RESNET, images, work / "o2", n, *STAGES), work / "o2"),
        "torchlens": (me("torchlens", RESNET, images, work / "o3", n, *STAGES), work / "o3"),
        "hookdump": (
            hookdump("-m", RESNET, *stages, images, "--batch-size", n, "-o", work / "o4"),
            work / "o4",
        ),
    }
    if not args.peers:
        del cases["hand-written hooks"], cases["torchlens"]
    elif not harness.have("torchlens", "the torchlens row"):
        del cases["torchlens"]
    goals: list[Goal] = [
        ("hookdump", "bare forward", "<=", 1.03),
        ("hand-written hooks", "hookdump", ">=", 1.05),
        ("torchlens", "hookdump", ">=", 4.0),
        (
            "hookdump",
            "bare, hookdump's settings",
            "<=",
            1.05,
        ),  # the hooks, copies and writing alone (issue 22)
    ]
    with_trees(cases, goals, args, work)
    title = f"{RESNET}, {', '.join(STAGES)}, {args.images} photos, batch {n}"
    res = bench(title, cases, "bare forward", goals, args.rounds)
    if args.memory:
        large = photos(work / "images-large", args.images_large)
        big = harness.process(hookdump("-m", RESNET, *stages, large, "--batch-size", n, "-o", work / "o5"),
                              out=work / "o5")  # fmt: skip
        small = harness.stat(res["hookdump"], "rss")
        grew = big.rss / small
        harness.say(f"hookdump peak RSS: {args.images} photos {small:.0f} MB (median), {args.images_large}"
                    f" photos {big.rss:.0f} MB (one run, {big.wall:.0f}s); goal {args.images_large} /"
                    f" {args.images} <= 1.10: {grew:.2f} {'met' if grew <= 1.10 else 'MISSED'}")  # fmt: skip


def same_settings(title: str, model: str, layers: list[str], images: Path, work: Path,
                  args: argparse.Namespace) -> None:  # fmt: skip
    """The bare forward, the same with hookdump's process settings, and ``hookdump capture``: the row
    that issue 22's goal is measured on (hookdump / the same-settings bare forward <= 1.05)."""
    n, picked = args.batch, [x for layer in layers for x in ("-l", layer)]
    cases = {
        "bare forward": (me("bare", model, images, work / "o1", n), work / "o1"),
        "bare, hookdump's settings": (me("bare+", model, images, work / "o0", n), work / "o0"),
        "hookdump": (
            hookdump("-m", model, *picked, images, "--batch-size", n, "-o", work / "o4"),
            work / "o4",
        ),
    }
    goals: list[Goal] = [("hookdump", "bare, hookdump's settings", "<=", 1.05)]
    with_trees(cases, goals, args, work)
    bench(title, cases, "bare forward", goals, args.rounds)


def with_trees(cases: Cases, goals: list[Goal], args: argparse.Namespace, work: Path) -> None:
    """A hookdump row more for each tree of ``--trees``: the same command, another folder, that code."""
    for i, tree in enumerate(args.trees.split(",") if args.trees else []):
        label = f"hookdump {Path(tree).name}"
        cases[label] = ([*cases["hookdump"][0][:-1], str(work / f"t{i}")], work / f"t{i}")
        TREES[label] = tree
        goals.append((label, "bare, hookdump's settings", "<=", 1.05))


def vit(args: argparse.Namespace, images: Path, work: Path) -> None:
    """Every block's class token: bare, hand-written ``output[:, 0]``, ``hookdump --reduce cls``."""
    n, blocks = args.batch, [f"blocks.{i}" for i in range(VIT_DEPTH)]
    command = hookdump(
        "-m", VIT, "-l", "blocks.*", "--reduce", "cls", images, "--batch-size", n, "-o", work / "o3"
    )
    cases = {
        "bare forward": (me("bare", VIT, images, work / "o1", n), work / "o1"),
        "hand-written output[:, 0]": (me("hand-cls", VIT, images, work / "o2", n, *blocks), work / "o2"),
        "hookdump --reduce cls": (command, work / "o3"),
    }
    goals = [("hookdump --reduce cls", "bare forward", "<=", 1.03),
             ("hand-written output[:, 0]", "hookdump --reduce cls", ">=", 1.05)]  # fmt: skip
    title = f"{VIT}, every block's class token, {args.images} photos, batch {n}"
    bench(title, cases, "bare forward", goals, args.rounds)


def twins(args: argparse.Namespace, work: Path) -> None:
    """The seed's job from a checkpoint: the seed's script against ``hookdump capture --checkpoint``."""
    ckpt, photo = work / "twins.safetensors", harness.ROOT / "hookdump" / "data" / "sample.jpg"
    harness.process(me("ckpt", ckpt), check=True)
    command = hookdump("-m", TWINS, "--checkpoint", ckpt, "-l", TWINS_LAYER, photo, "-o", work / "o2")
    cases = {"seed script": (me("seed", ckpt, photo, work / "o1"), work / "o1"),
             "seed, hookdump's settings": (me("seed+", ckpt, photo, work / "o0"), work / "o0"),
             "hookdump --checkpoint": (command, work / "o2")}  # fmt: skip
    goals = [("hookdump --checkpoint", "seed script", "<=", 0.9),
             ("hookdump --checkpoint", "seed, hookdump's settings", "<=", 1.0)]  # fmt: skip
    title = f"{TWINS} from a .safetensors checkpoint, {TWINS_LAYER}, one photo"
    bench(title, cases, "seed script", goals, args.rounds)


def main() -> None:
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--images", type=int, default=256, help="photos of every case but twins")
    options.add_argument("--batch", type=int, default=32, help="images per forward pass, everyone")
    options.add_argument("--cases", default="resnet,vit,twins,vit-tokens,twins-many,tv",
                         help="comma-separated: resnet, vit, twins, vit-tokens, twins-many, tv")  # fmt: skip
    options.add_argument("--no-peers", dest="peers", action="store_false",
                         help="resnet without the hand-written and torchlens rows")  # fmt: skip
    options.add_argument("--images-twins", type=int, default=64, help="photos of twins-many")
    options.add_argument("--trees", default="", help="a hookdump row more for each of these comma-separated"
                         " source trees (PYTHONPATH), to compare versions")  # fmt: skip
    options.add_argument("--memory", action="store_true", help="hookdump's peak RSS at --images-large too")
    options.add_argument("--images-large", type=int, default=2048, help="photos of the --memory run")
    args = harness.parse(options, quick={"images": 8, "batch": 4, "rounds": 1, "cases": "resnet,vit"})
    chosen, began = set(args.cases.split(",")), time.perf_counter()
    harness.say("fresh processes, whole-command wall time (imports, model build, decode, transform, forward,"
                f" saving), cpu, {args.rounds} interleaved rounds, medians; own s: the seconds hookdump"
                " reports\n")  # fmt: skip
    with harness.workdir("hookdump-dataset-") as work:
        images = photos(work / "images", args.images)
        if "resnet" in chosen:
            resnet(args, images, work)
        if "vit" in chosen:
            vit(args, images, work)
        if "twins" in chosen:
            twins(args, work)
        if "vit-tokens" in chosen:
            title = f"{VIT}, every block, full tokens, {args.images} photos, batch {args.batch}"
            same_settings(title, VIT, ["blocks.*"], images, work, args)
        if "twins-many" in chosen:
            few = photos(work / "images-twins", args.images_twins)
            layers = ["pos_block.*.proj.0", "blocks.*.*"]
            title = f"{TWINS}, {' + '.join(layers)}, {args.images_twins} photos, batch {args.batch}"
            same_settings(title, TWINS, layers, few, work, args)
        if "tv" in chosen:
            title = f"{TV}, {', '.join(STAGES)}, {args.images} photos, batch {args.batch}"
            same_settings(title, TV, STAGES, images, work, args)
    harness.say(f"total {time.perf_counter() - began:.0f}s")


if __name__ == "__main__":
    main()
