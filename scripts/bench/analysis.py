"""``hookdump compare`` and ``hookdump diff`` against what people write, whole command against whole command.

Every case is a fresh process timed end to end under ``/usr/bin/time -v`` (wall time, user + sys cpu, peak
RSS); the cases take turns round by round (this machine is shared and noisy: read the ratios), and the
script prints the median of each. The captures are made first by ``hookdump capture`` itself, from copies of
scikit-image's RGB and grayscale sample photos cycled to ``--images`` (as ``bench_dataset.py`` cycles them),
in a temporary folder removed at the end.

* compare: the 12 blocks of ``vit_small_patch16_224`` (seeded random weights, ``--input-size``, default
  3x64x64: 17 tokens x 384 per block and input) over ``--images`` inputs. Linear CKA (unbiased) of every
  block with every block: ``hookdump compare`` against a hand-written numpy loop (each block loaded whole as
  float64, its Gram ``X X^T``, Song et al.'s unbiased HSIC term by term); RSA (correlation RDMs, Spearman):
  ``hookdump compare --metric rsa`` against rsatoolbox (``calc_rdm`` per block, ``compare`` of every pair).
  The matrices are checked to agree (1e-6) before anything is timed.
* diff: two captures of ``--diff-mb`` MB (resnet18's ``layer1`` at 224x224, 0.8 MB an input, as many inputs
  as that takes; the second capture the same command again, so every element is compared): ``hookdump
  diff`` against ``numpy.allclose`` on the two ``np.load(mmap_mode="r")`` arrays of each tensor.

    python scripts/bench_analysis.py [--images 512] [--diff-mb 200] [--rounds 3] [--input-size 3,64,64]

The issue's full sizes are ``--images 2048 --diff-mb 2048``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_dataset import photos  # the same cycled photos as the dataset benchmark (scripts/ is on sys.path)

HOOKDUMP = str(Path(sys.executable).with_name("hookdump"))
Result = tuple[float, float, float]  # wall s, cpu s, peak RSS MB


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


def run(cmd: list[str]) -> tuple[Result, str]:
    """Wall seconds, cpu seconds and peak RSS (MB) of one command, and its stdout (nan: it failed)."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):  # diff's 1 is an answer
        print(f"FAILED ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}", file=sys.stderr)
        return (math.nan, math.nan, math.nan), ""
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024  # type: ignore[index]
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", done.stderr))
    return (wall, cpu, rss), done.stdout


def me(kind: str, *args: object) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--worker", kind, *map(str, args)]


def hd(*args: object) -> list[str]:
    return [HOOKDUMP, *map(str, args)]


def capture(*args: object) -> None:
    started = time.perf_counter()
    (_, cpu, _), _ = run(hd("capture", *args, "-q"))
    if math.isnan(cpu):
        raise SystemExit("the capture failed")
    print(f"  captured in {time.perf_counter() - started:.1f} s: hookdump capture {' '.join(map(str, args))}")


def bench(cases: dict[str, list[str]], rounds: int) -> tuple[dict[str, list[Result]], dict[str, str]]:
    """Every case once a round, in turn."""
    results: dict[str, list[Result]] = {name: [] for name in cases}
    outputs: dict[str, str] = {}
    for _ in range(rounds):
        for name, cmd in cases.items():
            result, outputs[name] = run(cmd)
            results[name].append(result)
    return results, outputs


def table(title: str, results: dict[str, list[Result]], base: str) -> None:
    print(f"\n{title}")
    head = f"  {'case':34} {'wall s':>8} {'cpu s':>8} {'peak MB':>8}"
    print(f"{head}   (medians of {len(results[base])}) vs {base}")
    ref = [statistics.median(r[i] for r in results[base]) for i in range(3)]
    for name, runs in results.items():
        med = [statistics.median(r[i] for r in runs) for i in range(3)]
        ratio = "" if name == base else f"   wall x{med[0] / ref[0]:.2f}, peak x{med[2] / ref[2]:.2f}"
        print(f"  {name:34} {med[0]:8.2f} {med[1]:8.2f} {med[2]:8.0f}{ratio}")


def agree(mine: str, theirs: str, what: str, within: float) -> None:
    import numpy as np

    a, b = np.array(json.loads(mine)["matrix"], float), np.array(json.loads(theirs)["matrix"], float)
    gap = float(np.abs(a - b).max())
    print(f"  {what}: largest difference between the two matrices {gap:.1e}")
    if gap > within:
        raise SystemExit(f"{what}: the matrices differ by {gap}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512, help="inputs of the ViT capture (compare)")
    parser.add_argument("--diff-mb", type=float, default=200, help="MB of each capture (diff)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--input-size", default="3,64,64", help="the ViT's input size")
    args = parser.parse_args()
    side = int(args.input_size.split(",")[-1])
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp:
        work = Path(tmp)
        print(f"compare: vit_small_patch16_224 at {args.input_size}, {args.images} inputs;", end=" ")
        print(f"diff: 2 x {args.diff_mb:g} MB")
        vit = work / "vit"
        images = photos(work / "photos", args.images)
        model = (
            "-m",
            "vit_small_patch16_224",
            "--model-arg",
            f"img_size={side}",
            "--input-size",
            args.input_size,
        )
        capture(*model, "-l", "blocks.*", images, "-o", vit)
        per_input = 64 * 56 * 56 * 4
        count = max(1, round(args.diff_mb * 1e6 / per_input))
        diff_images = photos(work / "photos-diff", count)
        for name in ("a", "b"):
            capture("-m", "resnet18", "-l", "layer1", diff_images, "-o", work / name, "--batch-size", "16")
        size = (work / "a" / "layer1.npy").stat().st_size
        print(f"  diff captures: {count} inputs, {size / 1e6:.0f} MB each")
        cka_cases = {
            "hookdump compare (CKA)": hd("compare", vit, "--json"),
            "numpy CKA loop": me("cka-numpy", vit),
        }
        rsa_cases = {
            "hookdump compare --metric rsa": hd(
                "compare", vit, "--metric", "rsa", "-o", work / "rsa", "--json"
            ),
            "rsatoolbox calc_rdm + compare": me("rsa-rsatoolbox", vit),
        }
        diff_cases = {"hookdump diff": hd("diff", work / "a", work / "b", "--json"),
                      "numpy.allclose on memmaps": me("allclose", work / "a", work / "b")}  # fmt: skip
        # RSA within 1e-3: the RDMs agree to ~1e-15, but near-equal distances can rank the other way round
        for cases, title, within in ((cka_cases, "CKA", 1e-6), (rsa_cases, "RSA (Spearman)", 1e-3)):
            (_, mine), (_, theirs) = (run(cmd) for cmd in cases.values())
            agree(mine, theirs, title, within)
        results, _ = bench(cka_cases, args.rounds)
        table(f"CKA of 12 x 12 blocks, {args.images} inputs", results, "numpy CKA loop")
        results, _ = bench(rsa_cases, args.rounds)
        table(f"RSA of 12 x 12 blocks, {args.images} inputs", results, "rsatoolbox calc_rdm + compare")
        results, outputs = bench(diff_cases, args.rounds)
        table(f"diff of two {size / 1e6:.0f} MB captures", results, "numpy.allclose on memmaps")
        print(f"  hookdump diff: {'differs' if json.loads(outputs['hookdump diff'])['differs'] else 'same'};"
              f" numpy.allclose: {json.loads(outputs['numpy.allclose on memmaps'])}")  # fmt: skip


if __name__ == "__main__":
    main()
