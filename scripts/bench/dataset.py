"""Capture over a folder of photos, whole command against whole command: hookdump and what people write.

Every case is a fresh process (imports, model build with ``torch.manual_seed(0)`` as hookdump's
``--seed 0``, decode, timm's eval transform, forward, saving) timed end to end and run under
``/usr/bin/time -v`` for its peak RSS (of the largest process: a DataLoader worker is not added) and cpu
time (user + sys, worker processes included: what contention moves least); the cases take turns round by
round (this machine is shared and noisy: read the ratios), and the script prints the median and fastest
wall time. The photos are copies of scikit-image's RGB and grayscale sample photos, cycled to
``--images``, in a temporary folder removed at the end.

* resnet50, ``layer1`` .. ``layer4``, batch 32: the bare forward (``inference_mode``, no hooks, nothing
  saved); a careful hand-written loop (forward hooks that clone, each batch appended to ``.npy`` files
  whose header already holds the final shape); torchlens (``torchlens.extract`` of the four modules, per
  batch, written the same way); ``hookdump capture`` with its defaults.
* vit_small_patch16_224, every block's output reduced to its class token: bare, hand-written hooks keeping
  ``output[:, 0]``, and ``hookdump capture -l 'blocks.*' --reduce cls`` (skipped with a note while
  ``hookdump capture --help`` does not list ``--reduce``).
* twins_svt_large from a seeded ``.safetensors`` checkpoint, ``pos_block.3.proj.0``, the bundled photo: the
  seed's script (``create_model``, ``load_state_dict(load_file(...))``, one hook, forward, ``np.save``)
  against ``hookdump capture --checkpoint``.
* issue 22's rows, each the bare forward, the same with hookdump's process settings and ``hookdump
  capture`` (goal: hookdump / the same-settings bare forward <= 1.05): ``vit-tokens`` (vit_small, every
  block, full tokens), ``twins-many`` (twins_svt_large ``pos_block.*.proj.0`` + ``blocks.*.*``,
  ``--images-twins`` photos), ``tv`` (torchvision's resnet50, ``tv:resnet50``, the four stages).
  ``--no-peers`` drops resnet's hand-written and torchlens rows. Under every row the script prints its
  breakdown (``HOOKDUMP_PROFILE``, ``hookdump/store/folder/profile.py``; the script's own cases write the same
  spans: setup, decode, forward): medians of the seconds in each span of the run, main thread and writer
  thread, and what the process spent outside the run (its start and imports, its exit).
* ``--scale`` (long, not for CI): resnet50 ``layer4 --reduce mean`` and ``layer3`` float16 full maps over
  ``--scale-images`` SMALL,LARGE photos (default 1,000 and 10,000, scikit-image's photos and their mirror
  images cycled): wall time against LARGE / SMALL times the small run (goal <= 1.1), peak RSS against the
  small run (goal <= 1.10), and ``--resume`` after a SIGKILL at 60% byte-identical; ``--scale-rounds 3,1``
  runs the small size three times and the large once (medians compared), ``--scale-cases layer4`` one of
  the two runs.
* ``--memory``: hookdump's peak RSS on resnet50 at ``--images-large`` photos against ``--images`` (slow).
* "hookdump's settings": the bare forward (and the seed's script) run with what ``hookdump`` does to its
  own process (malloc keeps freed memory within a batch and gives it back after it, ``allocator``;
  OpenMP's idle threads spin less, ``openmp.short_spin``; no interpreter teardown at exit,
  ``shell.exit_now``), so that the hooks, copies and writing are measured alone.

    .venv/bin/python scripts/bench_dataset.py [--images 256] [--rounds 3] [--batch 32]
        [--cases resnet,vit,twins,vit-tokens,twins-many,tv] [--no-peers] [--images-twins 64]
        [--memory] [--images-large 2048] [--scale [--scale-rounds 1,1] [--scale-cases layer4,layer3]]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

ROOT = Path(__file__).resolve().parent.parent
HOOKDUMP = str(Path(sys.executable).with_name("hookdump"))
RESNET, STAGES = "resnet50", ["layer1", "layer2", "layer3", "layer4"]
VIT, VIT_DEPTH = "vit_small_patch16_224", 12
TWINS, TWINS_LAYER = "twins_svt_large", "pos_block.3.proj.0"
TV = "tv:resnet50"
Result = tuple[float, float, float, float | None]  # wall s, peak RSS MB, cpu s, hookdump's own seconds
Goal = tuple[str, str, str, float]  # a, b, "<=" or ">=", limit of a's median / b's


def worker(kind: str, args: list[str]) -> None:
    """One case's work, in this fresh process (the script runs itself as ``--worker KIND ...``)."""
    import numpy as np
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    from hookdump.cli.process import give_back  # after each batch: nothing unless the process settings are on
    from hookdump.store.folder.profile import process_age

    imported, began = process_age(), time.perf_counter()

    if kind == "ckpt":  # the twins checkpoint, seeded weights
        from safetensors.torch import save_file

        torch.manual_seed(0)
        save_file({k: v.contiguous() for k, v in timm.create_model(TWINS).state_dict().items()}, args[0])
        return
    if kind == "seed":  # the seed's script, done right: eval, no_grad, a hook that clones
        from safetensors.torch import load_file

        ckpt, photo, out = args
        model = timm.create_model(TWINS)
        model.load_state_dict(load_file(ckpt))
        model.eval()
        transform = create_transform(**resolve_data_config({}, model=model), is_training=False)
        saved: list[torch.Tensor] = []
        module = dict(model.named_modules())[TWINS_LAYER]
        module.register_forward_hook(lambda m, a, o: saved.append(o.detach().clone()))
        with torch.no_grad():
            model(transform(Image.open(photo).convert("RGB")).unsqueeze(0))
        Path(out).mkdir(parents=True)
        np.save(Path(out) / f"{TWINS_LAYER}.npy", saved[0].numpy())
        return
    name, folder, out, batch, *names = args
    torch.manual_seed(0)
    if name.startswith("tv:"):  # torchvision's model, ImageNet's resize 256 and crop 224 (as hookdump's)
        import torchvision
        from torchvision import transforms as T

        model = torchvision.models.get_model(name[3:], weights=None).eval()
        mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
        transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(mean, std)])
    else:
        model = timm.create_model(name).eval()
        transform = create_transform(**resolve_data_config({}, model=model), is_training=False)
    paths = sorted(Path(folder).iterdir())
    size = int(batch)
    kept: dict[str, torch.Tensor] = {}
    files: dict[str, BinaryIO] = {}
    modules = dict(model.named_modules())
    cls = kind == "hand-cls"
    if kind in ("hand", "hand-cls"):
        for n in names:
            keep = (lambda o: o[:, 0].clone()) if cls else (lambda o: o.detach().clone())
            modules[n].register_forward_hook(lambda m, a, o, n=n, keep=keep: kept.__setitem__(n, keep(o)))
    if kind == "torchlens":
        import torchlens

    def save(start: int, outputs: dict[str, torch.Tensor]) -> None:
        for n, t in outputs.items():
            if n not in files:  # the .npy header holds the final shape, then each batch's rows follow
                files[n] = (Path(out) / f"{n}.npy").open("wb")
                header = {"descr": "<f4", "fortran_order": False, "shape": (len(paths), *t.shape[1:])}
                np.lib.format.write_array_header_2_0(files[n], header)
            t.numpy().tofile(files[n])

    if kind != "bare":
        Path(out).mkdir(parents=True)
    grad_off = torch.no_grad() if kind == "torchlens" else torch.inference_mode()
    spans = {"setup": time.perf_counter() - began, "decode": 0.0, "forward": 0.0}  # as hookdump's profile
    with grad_off:
        for start in range(0, len(paths), size):
            t0 = time.perf_counter()
            x = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths[start : start + size]])
            t1 = time.perf_counter()
            if kind == "torchlens":
                save(start, torchlens.extract(model, x, names))
            else:
                model(x)
                save(start, kept)
            spans["decode"] += t1 - t0
            spans["forward"] += time.perf_counter() - t1  # its hooks and saving too, where it has them
            give_back()
    for f in files.values():
        f.close()
    target = os.environ.get("HOOKDUMP_PROFILE")
    if target:  # the same spans as hookdump's breakdown, for the rows side by side
        extra = {"before run": imported} if imported is not None else {}
        Path(target).write_text(json.dumps({**spans, **extra, "run": time.perf_counter() - began}))


PROFILES: dict[str, list[dict[str, float]]] = {}  # case -> hookdump's breakdown of each round


def run(cmd: list[str], case: str | None = None, tree: str | None = None) -> Result:
    """Wall seconds, peak RSS (MB) and hookdump's own reported seconds of one command (nan: it failed);
    a hookdump command's breakdown (``HOOKDUMP_PROFILE``) is kept in ``PROFILES[case]``."""
    profile = Path(tempfile.mkdtemp(prefix="hookdump-profile-")) / "profile.json"
    env = {**os.environ, "HOOKDUMP_PROFILE": str(profile)}
    if tree:  # hookdump's code from this source tree (--trees)
        env["PYTHONPATH"] = tree
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if profile.exists() and case is not None:
        PROFILES.setdefault(case, []).append({**json.loads(profile.read_text()), "wall": wall})
    shutil.rmtree(profile.parent, ignore_errors=True)
    if done.returncode != 0:  # a failed run counts as nan (others edit hookdump while this runs)
        tail = done.stderr.split("\tCommand being timed")[0][-3000:]
        print(f"FAILED ({done.returncode}): {' '.join(cmd)}\n{tail}", file=sys.stderr)
        return math.nan, math.nan, math.nan, None
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024  # type: ignore[index]
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", done.stderr))
    own = re.search(r"wrote \d+ file\(s\).* in ([\d.]+)s on", done.stdout)
    return wall, rss, cpu, float(own[1]) if own else None


def me(kind: str, *args: object) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--worker", kind, *map(str, args)]


def hookdump(*args: object) -> list[str]:
    return [HOOKDUMP, "capture", *map(str, args)]


def photos(folder: Path, count: int) -> Path:
    """``count`` hard links (or copies) of scikit-image's RGB and grayscale photos, cycled."""
    from PIL import Image

    data = Path(importlib.util.find_spec("skimage").origin).parent / "data"  # type: ignore[arg-type,union-attr]
    picks = [p for p in sorted(data.glob("*.png")) if Image.open(p).mode in ("RGB", "L")]
    folder.mkdir()
    for i in range(count):
        target = folder / f"img{i:05d}.png"
        try:
            os.link(picks[i % len(picks)], target)
        except OSError:
            shutil.copy(picks[i % len(picks)], target)
    return folder


TREES: dict[str, str] = {}  # case -> the source tree its hookdump runs from (--trees)


def bench(cases: dict[str, tuple[list[str], Path]], rounds: int) -> dict[str, list[Result]]:
    """Every case (command, output folder) once a round, in turn; the folder is removed after each run."""
    results: dict[str, list[Result]] = {name: [] for name in cases}
    for r in range(rounds):
        for name, (cmd, out) in cases.items():
            shutil.rmtree(out, ignore_errors=True)
            results[name].append(run(cmd, name, TREES.get(name)))
            shutil.rmtree(out, ignore_errors=True)
            print(f"  round {r + 1}/{rounds} {name}: {results[name][-1][0]:.1f}s", file=sys.stderr)
    return results


def med(values: list[Result], i: int) -> float:
    done = [float(v[i] or 0.0) for v in values if not math.isnan(v[0])]
    return statistics.median(done) if done else math.nan


def table(title: str, results: dict[str, list[Result]], base: str, goals: list[Goal]) -> None:
    """Median and fastest wall time, median cpu time (user + sys, worker processes included), each as a
    ratio to ``base``, peak RSS; then the goal lines ``a / b`` (``<=`` or ``>=`` limit) on median wall."""
    print(title)
    head = f"{'case':<26}{'median s':>9}{'x':>6}{'min s':>8}{'x':>6}{'cpu s':>8}{'x':>6}"
    print(f"{head}{'peak RSS MB':>12}{'own s':>7}")
    walls = {name: med(values, 0) for name, values in results.items()}
    cpus = {name: med(values, 2) for name, values in results.items()}
    mins = {name: min((v[0] for v in values), default=math.nan) for name, values in results.items()}
    for name, values in results.items():
        owns = [v[3] for v in values if v[3] is not None]
        own = f"{statistics.median(owns):>7.1f}" if owns else ""
        wall, fast, cpu = walls[name], mins[name], cpus[name]
        print(f"{name:<26}{wall:>9.1f}{wall / walls[base]:>6.2f}{fast:>8.1f}{fast / mins[base]:>6.2f}"
              f"{cpu:>8.1f}{cpu / cpus[base]:>6.2f}{med(values, 1):>12.0f}{own}")  # fmt: skip
    for a, b, op, limit in goals:
        if a in walls and b in walls:
            ratio = walls[a] / walls[b]
            met = ratio <= limit if op == "<=" else ratio >= limit
            verdict = "not measured (a run failed)" if math.isnan(ratio) else "met" if met else "MISSED"
            also = f"(min {mins[a] / mins[b]:.2f}, cpu {cpus[a] / cpus[b]:.2f})"
            print(f"goal: {a} / {b} {op} {limit:g}: {ratio:.2f} {verdict} {also}")
    for name in results:
        if PROFILES.get(name):
            breakdown(name, PROFILES.pop(name))
    print()


MAIN = ("setup", "decode", "forward", "hooks", "copy", "reduce", "writer wait", "between batches",
        "writer drain", "commit")  # fmt: skip
WRITER = ("stats", "write", "checkpoint", "on_batch")


def breakdown(name: str, profiles: list[dict[str, float]]) -> None:
    """Medians over the rounds of where ``name``'s time went (``hookdump.store.folder.profile``): the main
    thread's spans (copy and reduce are part of hooks), the writer thread's (they overlap the forward), and
    what the process spent outside ``capture.run`` (imports, argument parsing, exit)."""

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
    print(f"  breakdown of {name} (s, medians of {len(profiles)}): wall {wall:.2f} = {outside}"
          f" + run {run_s:.2f}")  # fmt: skip
    print(f"    main thread: {main}")
    if writer:
        print(f"    writer thread (overlaps the forward): {writer}")


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
    elif importlib.util.find_spec("torchlens") is None:
        print("note: torchlens is not installed (pip install torchlens): its row is left out")
        del cases["torchlens"]
    tree_goals: list[Goal] = []
    with_trees(cases, tree_goals, args, work)
    res = bench(cases, args.rounds)
    goals = [
        ("hookdump", "bare forward", "<=", 1.03),
        ("hand-written hooks", "hookdump", ">=", 1.05),
        ("torchlens", "hookdump", ">=", 4.0),
        ("hookdump", "bare, hookdump's settings", "<=", 1.05),
        *tree_goals,
    ]  # the last: the hooks, copies and writing alone (issue 22)
    table(f"{RESNET}, {', '.join(STAGES)}, {args.images} photos, batch {n}", res, "bare forward", goals)
    if args.memory:
        large = photos(work / "images-large", args.images_large)
        wall, big, _, _ = run(hookdump("-m", RESNET, *stages, large, "--batch-size", n, "-o", work / "o5"))
        shutil.rmtree(work / "o5")
        shutil.rmtree(large)
        small = med(res["hookdump"], 1)
        print(f"hookdump peak RSS: {args.images} photos {small:.0f} MB (median), {args.images_large} photos "
              f"{big:.0f} MB (one run, {wall:.0f}s); goal {args.images_large} / {args.images} <= 1.10: "
              f"{big / small:.2f} {'met' if big / small <= 1.10 else 'MISSED'}\n")  # fmt: skip


def same_settings(title: str, model: str, layers: list[str], extra: list[str], images: Path, work: Path,
                  args: argparse.Namespace) -> None:  # fmt: skip
    """The bare forward, the same with hookdump's process settings, and ``hookdump capture``: the row
    that issue 22's goal is measured on (hookdump / the same-settings bare forward <= 1.05)."""
    n, picked = args.batch, [x for layer in layers for x in ("-l", layer)]
    cases = {
        "bare forward": (me("bare", model, images, work / "o1", n), work / "o1"),
        "bare, hookdump's settings": (me("bare+", model, images, work / "o0", n), work / "o0"),
        "hookdump": (hookdump("-m", model, *picked, *extra, images, "--batch-size", n, "-o", work / "o4"),
                     work / "o4"),
    }  # fmt: skip
    goals = [("hookdump", "bare, hookdump's settings", "<=", 1.05)]
    with_trees(cases, goals, args, work)
    table(title, bench(cases, args.rounds), "bare forward", goals)


def with_trees(cases: dict[str, tuple[list[str], Path]], goals: list[Goal], args: argparse.Namespace,
               work: Path) -> None:  # fmt: skip
    """A hookdump row more for each tree of ``--trees``: the same command, another folder, that code."""
    for i, tree in enumerate(args.trees.split(",") if args.trees else []):
        label = f"hookdump {Path(tree).name}"
        cases[label] = ([*cases["hookdump"][0][:-1], str(work / f"t{i}")], work / f"t{i}")
        TREES[label] = tree
        goals.append((label, "bare, hookdump's settings", "<=", 1.05))


def vit(args: argparse.Namespace, images: Path, work: Path) -> None:
    """Every block's class token: bare, hand-written ``output[:, 0]``, ``hookdump --reduce cls``."""
    helptext = subprocess.run([HOOKDUMP, "capture", "--help"], capture_output=True, text=True).stdout
    if "--reduce" not in helptext:
        print(f"note: {VIT} case skipped: `hookdump capture --help` does not list --reduce yet\n")
        return
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
    table(title, bench(cases, args.rounds), "bare forward", goals)


def twins(args: argparse.Namespace, work: Path) -> None:
    """The seed's job from a checkpoint: the seed's script against ``hookdump capture --checkpoint``."""
    ckpt, photo = work / "twins.safetensors", ROOT / "hookdump" / "data" / "sample.jpg"
    run(me("ckpt", ckpt))
    command = hookdump("-m", TWINS, "--checkpoint", ckpt, "-l", TWINS_LAYER, photo, "-o", work / "o2")
    cases = {"seed script": (me("seed", ckpt, photo, work / "o1"), work / "o1"),
             "seed, hookdump's settings": (me("seed+", ckpt, photo, work / "o0"), work / "o0"),
             "hookdump --checkpoint": (command, work / "o2")}  # fmt: skip
    goals = [("hookdump --checkpoint", "seed script", "<=", 0.9),
             ("hookdump --checkpoint", "seed, hookdump's settings", "<=", 1.0)]  # fmt: skip
    table(f"{TWINS} from a .safetensors checkpoint, {TWINS_LAYER}, one photo", bench(cases, args.rounds),
          "seed script", goals)  # fmt: skip


def flipped_photos(folder: Path, count: int) -> Path:
    """``count`` photos for ``--scale``: scikit-image's RGB and grayscale photos and their mirror images
    (written once), cycled as hard links."""
    from PIL import Image, ImageOps

    made = folder.with_name(folder.name + "-sources")
    made.mkdir()
    data = Path(importlib.util.find_spec("skimage").origin).parent / "data"  # type: ignore[arg-type,union-attr]
    picks = [p for p in sorted(data.glob("*.png")) if Image.open(p).mode in ("RGB", "L")]
    sources = list(picks)
    for p in picks:
        mirrored = made / f"mirrored-{p.name}"
        ImageOps.mirror(Image.open(p)).save(mirrored)
        sources.append(mirrored)
    folder.mkdir()
    for i in range(count):
        os.link(sources[i % len(sources)], folder / f"img{i:05d}.png")
    return folder


def scale(args: argparse.Namespace, work: Path) -> None:
    """Issue 22's scale run: resnet50 ``layer4 --reduce mean`` and ``layer3`` full maps in float16 over
    ``--scale-images`` SMALL,LARGE photos, one run each; the large run's wall time against LARGE / SMALL
    times the small one's (goal <= 1.1), its peak RSS against the small one's (goal <= 1.10); then the
    large ``layer3`` run killed (SIGKILL) after the checkpoint at 60% of its batches, ``--resume``d, and
    its files compared byte for byte with the uninterrupted run's."""
    small, large = (int(x) for x in args.scale_images.split(","))
    repeats = dict(zip((small, large), (int(x) for x in args.scale_rounds.split(",")), strict=True))
    n = args.batch
    runs = {"layer4 --reduce mean": ["-l", "layer4", "--reduce", "mean"],
            "layer3 float16": ["-l", "layer3", "--save-dtype", "float16"]}  # fmt: skip
    runs = {
        label: options for label, options in runs.items() if label.split()[0] in args.scale_cases.split(",")
    }
    folders = {count: flipped_photos(work / f"scale-{count}", count) for count in (small, large)}
    print(f"scale: {RESNET}, batch {n}, {small:,} and {large:,} photos (scikit-image's, cycled and mirrored)")
    for label, options in runs.items():
        got = {}
        for count, folder in folders.items():
            out = work / f"scale-out-{count}"
            tries = []
            for _ in range(repeats[count]):
                shutil.rmtree(out, ignore_errors=True)
                tries.append(
                    run(hookdump("-m", RESNET, *options, folder, "--batch-size", n, "-o", out, "--quiet"))
                )
            if len(tries) > 1:
                walls, peaks = [round(t[0]) for t in tries], [round(t[1]) for t in tries]
                print(f"  {label}: {count:,} photos, {len(tries)} runs: wall {walls} s, peak RSS {peaks} MB"
                      " (medians below)")  # fmt: skip
            got[count] = (statistics.median(t[0] for t in tries), statistics.median(t[1] for t in tries),
                          statistics.median(t[2] for t in tries), None)  # fmt: skip
            if count == large and label == "layer3 float16":
                resumed = work / "scale-resumed"
                batches = math.ceil(large / n)
                cmd = hookdump("-m", RESNET, *options, folder, "--batch-size", n, "-o", resumed, "--quiet")
                os.environ["HOOKDUMP_TEST_KILL_AT"] = f"checkpoint-{math.ceil(0.6 * batches)}"
                killed = subprocess.run(cmd, capture_output=True)
                del os.environ["HOOKDUMP_TEST_KILL_AT"]
                subprocess.run([*cmd, "--resume"], check=True, capture_output=True)
                same = all(
                    (resumed / f.name).read_bytes() == f.read_bytes() for f in sorted(out.glob("*.npy"))
                )
                print(f"  {label}: killed at 60% (exit {killed.returncode}), --resume: files byte-identical"
                      f" to the uninterrupted run: {same}")  # fmt: skip
                shutil.rmtree(resumed, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
        (ws, rs, _, _), (wl, rl, _, _) = got[small], got[large]
        wall_ratio, rss_ratio = wl / (ws * large / small), rl / rs
        print(f"  {label}: {small:,} photos {ws:.0f} s, {rs:.0f} MB; {large:,} photos {wl:.0f} s,"
              f" {rl:.0f} MB; wall / ({large // small} x small) {wall_ratio:.2f} (goal <= 1.1:"
              f" {'met' if wall_ratio <= 1.1 else 'MISSED'}), peak RSS ratio {rss_ratio:.2f} (goal <= 1.10:"
              f" {'met' if rss_ratio <= 1.10 else 'MISSED'})")  # fmt: skip
    print()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        kind = sys.argv[2]
        tuned = kind.endswith("+")  # hookdump's own process settings (allocator.py, openmp.py, exit_now)
        if tuned:
            from hookdump.cli.process import keep_freed_memory, short_spin

            keep_freed_memory()
            short_spin()  # before torch is imported
        worker(kind.removesuffix("+"), sys.argv[3:])
        if tuned:  # no interpreter teardown
            sys.stdout.flush()
            os._exit(0)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256, help="photos of every case but twins")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are printed")
    parser.add_argument("--batch", type=int, default=32, help="images per forward pass, everyone")
    parser.add_argument("--cases", default="resnet,vit,twins,vit-tokens,twins-many,tv",
                        help="comma-separated: resnet, vit, twins, vit-tokens, twins-many, tv")  # fmt: skip
    parser.add_argument("--no-peers", dest="peers", action="store_false",
                        help="resnet without the hand-written and torchlens rows")  # fmt: skip
    parser.add_argument("--images-twins", type=int, default=64, help="photos of twins-many")
    parser.add_argument("--trees", default="", help="a hookdump row more for each of these comma-separated"
                        " source trees (PYTHONPATH), to compare versions")  # fmt: skip
    parser.add_argument("--scale", action="store_true", help="issue 22's scale run (long: not for CI)")
    parser.add_argument("--scale-images", default="1000,10000", help="SMALL,LARGE photos of --scale")
    parser.add_argument("--scale-rounds", default="1,1", help="runs of SMALL,LARGE (medians compared)")
    parser.add_argument("--scale-cases", default="layer4,layer3", help="--scale's runs: layer4, layer3")
    parser.add_argument("--memory", action="store_true", help="hookdump's peak RSS at --images-large too")
    parser.add_argument("--images-large", type=int, default=2048, help="photos of the --memory run")
    args = parser.parse_args()
    chosen, began = set(args.cases.split(",")), time.perf_counter()
    print(f"fresh processes, whole-command wall time (imports, model build, decode, transform, forward,"
          f" saving), cpu, {args.rounds} interleaved rounds, medians; x: ratio to the first row;"
          f" cpu s and peak RSS from /usr/bin/time -v; own s: the seconds hookdump reports\n")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="hookdump-dataset-"))
    try:
        images = photos(work / "images", args.images)
        if "resnet" in chosen:
            resnet(args, images, work)
        if "vit" in chosen:
            vit(args, images, work)
        if "twins" in chosen:
            twins(args, work)
        if "vit-tokens" in chosen:
            title = f"{VIT}, every block, full tokens, {args.images} photos, batch {args.batch}"
            same_settings(title, VIT, ["blocks.*"], [], images, work, args)
        if "twins-many" in chosen:
            few = photos(work / "images-twins", args.images_twins)
            layers = ["pos_block.*.proj.0", "blocks.*.*"]
            title = f"{TWINS}, {' + '.join(layers)}, {args.images_twins} photos, batch {args.batch}"
            same_settings(title, TWINS, layers, [], few, work, args)
        if args.scale:
            scale(args, work)
        if "tv" in chosen:
            title = f"{TV}, {', '.join(STAGES)}, {args.images} photos, batch {args.batch}"
            same_settings(title, TV, STAGES, [], images, work, args)
    finally:
        shutil.rmtree(work)
    print(f"total {time.perf_counter() - began:.0f}s")


if __name__ == "__main__":
    main()
