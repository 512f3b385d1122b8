"""``hookdump compare`` and ``hookdump diff`` against what people write, whole command against whole command.

Every case is a fresh process timed end to end (wall time, user + sys cpu, peak RSS); the cases take turns
round by round (this machine is shared and noisy: read the ratios), and the script prints the median of
each. The captures are made first by ``hookdump capture`` itself, from copies of scikit-image's RGB and
grayscale sample photos cycled to ``--images`` (as the dataset benchmark cycles them), in a temporary
folder removed at the end.

* compare: the 12 blocks of ``vit_small_patch16_224`` (seeded random weights, ``--input-size``, default
  3x64x64: 17 tokens x 384 per block and input) over ``--images`` inputs. Linear CKA (unbiased) of every
  block with every block: ``hookdump compare`` against a hand-written numpy loop (the baseline: each block
  loaded whole as float64, its Gram ``X X^T``, Song et al.'s unbiased HSIC term by term); RSA (correlation
  RDMs, Spearman): ``hookdump compare --metric rsa`` against rsatoolbox (the baseline: ``calc_rdm`` per
  block, ``compare`` of every pair; left out, with a line, when rsatoolbox is not installed). The matrices
  are checked to agree (1e-6) before anything is timed.
* diff: two captures of ``--diff-mb`` MB (resnet18's ``layer1`` at 224x224, 0.8 MB an input, as many inputs
  as that takes; the second capture the same command again, so every element is compared): ``hookdump
  diff`` against ``numpy.allclose`` (the baseline) on the two ``np.load(mmap_mode="r")`` arrays of each
  tensor.

``--quick``: 16 inputs at 3x32x32, 2 x 3 MB, one round.

    python scripts/bench/analysis.py [--images 512] [--diff-mb 200] [--rounds 3] [--input-size 3,64,64]

The issue's full sizes are ``--images 2048 --diff-mb 2048``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import harness
from photos import photos


def worker(kind: str, args: list[str]) -> None:
    """The hand-written side of a case, in a process of its own."""
    import numpy as np

    folder = Path(args[0])
    names = [f"blocks.{i}" for i in range(12)]
    if kind == "cka-numpy":
        grams = []
        for name in names:
            x = np.load(folder / f"{name}.npy").astype(np.float64)
            x = x.reshape(len(x), -1)
            k = x @ x.T
            np.fill_diagonal(k, 0.0)
            grams.append(k)
        n = len(grams[0])
        one = np.ones(n)

        def hsic(k: np.ndarray, m: np.ndarray) -> float:
            terms = np.trace(k @ m) + (one @ k @ one) * (one @ m @ one) / ((n - 1) * (n - 2))
            return float(terms - 2 / (n - 2) * (one @ k @ m @ one)) / (n * (n - 3))

        own = [hsic(k, k) for k in grams]
        matrix = [
            [hsic(k, m) / math.sqrt(own[i] * own[j]) for j, m in enumerate(grams)]
            for i, k in enumerate(grams)
        ]
    elif kind == "rsa-rsatoolbox":
        from rsatoolbox.data import Dataset
        from rsatoolbox.rdm import calc_rdm, compare

        rdms = []
        for name in names:
            x = np.load(folder / f"{name}.npy").astype(np.float64)
            rdms.append(calc_rdm(Dataset(x.reshape(len(x), -1)), method="correlation"))
        matrix = [[float(compare(a, b, method="spearman")[0, 0]) for b in rdms] for a in rdms]
    elif kind == "allclose":
        other = Path(args[1])
        manifest = json.loads((folder / "manifest.json").read_text())
        same = True
        for entry in manifest["tensors"]:
            a = np.load(folder / entry["file"], mmap_mode="r")
            b = np.load(other / entry["file"], mmap_mode="r")
            same &= bool(np.allclose(a, b))
        print(json.dumps({"same": same}))
        return
    else:
        raise SystemExit(f"unknown worker {kind}")
    print(json.dumps({"matrix": matrix}))


def run(cmd: list[str]) -> harness.Run:
    return harness.process(cmd, ok=(0, 1))  # diff's 1 is an answer


def hd(*args: object) -> list[str]:
    return [harness.HOOKDUMP, *map(str, args)]


def me(kind: str, *args: object) -> list[str]:
    return harness.me(__file__, kind, *args)


def capture(*args: object) -> None:
    started = time.perf_counter()
    harness.process(hd("capture", *args, "-q"), check=True)
    harness.say(
        f"  captured in {time.perf_counter() - started:.1f} s: hookdump capture {' '.join(map(str, args))}"
    )


def agree(mine: str, theirs: str, what: str, within: float) -> None:
    import numpy as np

    a, b = np.array(json.loads(mine)["matrix"], float), np.array(json.loads(theirs)["matrix"], float)
    gap = float(np.abs(a - b).max())
    harness.say(f"  {what}: largest difference between the two matrices {gap:.1e}")
    if gap > within:
        raise SystemExit(f"{what}: the matrices differ by {gap}")


def prepare(args: argparse.Namespace, work: Path) -> float:
    """The ViT capture (``work/vit``) and the two diff captures (``work/a``, ``work/b``); their size."""
    side = int(args.input_size.split(",")[-1])
    images = photos(work / "photos", args.images)
    model = (
        "-m",
        "vit_small_patch16_224",
        "--model-arg",
        f"img_size={side}",
        "--input-size",
        args.input_size,
    )
    capture(*model, "-l", "blocks.*", images, "-o", work / "vit")
    count = max(1, round(args.diff_mb * 1e6 / (64 * 56 * 56 * 4)))
    diff_images = photos(work / "photos-diff", count)
    for name in ("a", "b"):
        capture("-m", "resnet18", "-l", "layer1", diff_images, "-o", work / name, "--batch-size", "16")
    size = (work / "a" / "layer1.npy").stat().st_size
    harness.say(f"  diff captures: {count} inputs, {size / 1e6:.0f} MB each")
    return size


def tables(
    args: argparse.Namespace, work: Path, size: float
) -> list[tuple[str, float, dict[str, list[str]]]]:
    """Each table's title, how near its two matrices must agree, and its cases (the baseline second)."""
    vit, a, b = work / "vit", work / "a", work / "b"
    cka = {"hookdump compare (CKA)": hd("compare", vit, "--json"), "numpy CKA loop": me("cka-numpy", vit)}
    found = [(f"CKA of 12 x 12 blocks, {args.images} inputs", 1e-6, cka)]
    if harness.have("rsatoolbox", "the RSA table"):
        ours = hd("compare", vit, "--metric", "rsa", "-o", work / "rsa", "--json")
        rsa = {
            "hookdump compare --metric rsa": ours,
            "rsatoolbox calc_rdm + compare": me("rsa-rsatoolbox", vit),
        }
        # RSA within 1e-3: the RDMs agree to ~1e-15, but near-equal distances can rank the other way round
        found.append((f"RSA of 12 x 12 blocks, {args.images} inputs", 1e-3, rsa))
    diff = {"hookdump diff": hd("diff", a, b, "--json"), "numpy.allclose on memmaps": me("allclose", a, b)}
    return [*found, (f"diff of two {size / 1e6:.0f} MB captures", math.nan, diff)]


def main() -> None:
    if found := harness.worker():
        return worker(*found)
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--images", type=int, default=512, help="inputs of the ViT capture (compare)")
    options.add_argument("--diff-mb", type=float, default=200, help="MB of each capture (diff)")
    options.add_argument("--input-size", default="3,64,64", help="the ViT's input size")
    args = harness.parse(options, quick={"images": 16, "diff_mb": 3, "input_size": "3,32,32", "rounds": 1})
    with harness.workdir("bench-analysis-") as work:
        harness.say(f"compare: vit_small_patch16_224 at {args.input_size}, {args.images} inputs; diff: 2 x"
                    f" {args.diff_mb:g} MB")  # fmt: skip
        found = tables(args, work, prepare(args, work))
        for title, within, cases in found[:-1]:  # the matrices, checked before anything is timed
            mine, theirs = (run(cmd).stdout for cmd in cases.values())
            agree(mine, theirs, title.split(" of")[0], within)
        for title, _, cases in found:
            results = harness.rounds({name: lambda c=cmd: run(c) for name, cmd in cases.items()}, args.rounds)
            notes = []
            if "hookdump diff" in results:
                said = json.loads(results["hookdump diff"][-1].stdout)["differs"]
                notes.append(f"hookdump diff: {'differs' if said else 'same'}; numpy.allclose:"
                             f" {json.loads(results['numpy.allclose on memmaps'][-1].stdout)}")  # fmt: skip
            harness.table(title, results, list(cases)[1], [harness.Column("x RSS", "rss", ratio=True)], notes)


if __name__ == "__main__":
    main()
