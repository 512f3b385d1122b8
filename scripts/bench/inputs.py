"""Inputs where they live (issue 38): a capture from webdataset tar shards against the same photos as files,
and against the floor, a plain PIL + ``torch.utils.data`` loop over the same shards; whole command against
whole command, side by side in one run.

The photos are scikit-image's RGB and grayscale photos cycled to ``--images`` (as ``bench_dataset.py`` makes
them), written once as files and once as ``--shards`` tar shards in webdataset's layout (``KEY.png`` and
``KEY.cls``). Each case is a fresh process under ``/usr/bin/time -v``, the cases take turns round by round
(this machine is shared and noisy: read the ratios), and the script prints medians:

* ``files``: ``hookdump capture -m resnet18 -l layer4 --reduce mean FOLDER --batch-size 64`` (default
  workers);
* ``tar``: the same command on ``'shards/train-{000..N}.tar'``;
* ``floor``: the plain loop: an ``IterableDataset`` that walks the shards' members with ``tarfile`` (each
  worker its own shards), PIL decodes, timm's eval transform, the model under ``inference_mode`` with one
  forward hook that keeps ``layer4``'s mean, ``np.save`` at the end.

Goal: ``tar / files`` <= 1.05 in wall time. ``--records N`` also captures N tiny photos (16x16, a 3x16x16
input to ``test_resnet``), whole and killed halfway then resumed, and prints the manifest's and the
table's sizes and what the inputs' records cost (their journal, ``inputs.parquet``, the resume check) as a
share of the wall time: their CPU time (``HOOKDUMP_PROFILE``'s ``records cpu``, ``resume check cpu``, and
the workers' sha256 of each input's bytes, timed here), and the wall time of their spans (an upper bound:
it counts the journal's fsync and the writer thread's waits for the interpreter while the model runs);
goal under 2%, with a manifest under 1 MB. ``--records 100000 --images 0`` times
the records alone. ``--preflight N`` times the preflight's checks of N tiny inputs (each header, and
``--dry-run``'s decoding) spread over forked processes against one process. ``--marginal R`` (with
``--records N``) measures the records' cost by its effect: R paired rounds of the whole capture with the
records' work in the main process done once and done twice (patched in this script's own process, the
second copy into a folder of its own); the difference is what one copy costs the wall time.

    .venv/bin/python scripts/bench_inputs.py [--images 512] [--shards 8] [--rounds 3] [--records 0]
        [--preflight 0] [--marginal 0]
"""

from __future__ import annotations

import argparse
import io
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench_dataset import HOOKDUMP, PROFILES, photos, run  # scripts/ is on sys.path


def worker(kind: str, args: list[str]) -> None:
    """The floor: a plain loop over the shards, in this process and its DataLoader workers."""
    import numpy as np
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    shards, out, batch = [Path(a) for a in args[0].split(",")], Path(args[1]), int(args[2])
    torch.manual_seed(0)
    model = timm.create_model("resnet18").eval()
    transform = create_transform(**resolve_data_config({}, model=model), is_training=False)

    class Samples(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            info = get_worker_info()
            mine = shards if info is None else shards[info.id :: info.num_workers]
            for shard in mine:
                with tarfile.open(shard) as tar:
                    for member in tar:
                        if member.name.endswith(".png"):
                            data = tar.extractfile(member).read()  # type: ignore[union-attr]
                            yield transform(Image.open(io.BytesIO(data)).convert("RGB"))

    kept: list[torch.Tensor] = []
    model.layer4.register_forward_hook(lambda m, i, o: kept.append(o.mean((2, 3)).clone()))
    loader = DataLoader(Samples(), batch_size=batch, num_workers=1)
    with torch.inference_mode():
        for x in loader:
            model(x)
    np.save(out, torch.cat(kept).numpy())


def capture_worker(twice: bool, args: list[str]) -> None:
    """``hookdump capture ARGS`` in this process (``hookdump.cli.app.main``, as the console script);
    ``twice``: with the inputs' records' work in the main process done twice, the second copy into a folder
    of its own (the journal's JSON and its appending with an fsync, the table's rows and its finishing, the
    names' check, the records gathered at the end): the A/B whose difference is what that work costs."""
    from hookdump.cli import process

    process.keep_freed_memory()  # as main() does, and before the patches import torch: libgomp and malloc
    process.short_spin()  # read these settings when torch loads (without them, a run took 18% longer)
    if twice:
        _records_twice()
    from hookdump.cli.app import main

    sys.argv = ["hookdump", *args]
    main()


def _records_twice() -> None:
    """Patch what the ``records`` spans run so that it runs twice (a shadow journal and table)."""
    import json
    import types
    from typing import Any

    from hookdump.capture import run as capture_run
    from hookdump.inputs import classfolders
    from hookdump.store.folder import inputrows, journal, writer

    shadow = Path(os.environ["HOOKDUMP_BENCH_SHADOW"])  # (made and removed by records_marginal)
    table: Any = inputrows.Rows
    append = journal.append_line

    def twice(module: Any, name: str) -> None:  # module.name(...) called twice, the second result kept
        once = getattr(module, name)
        setattr(module, name, lambda *a, **kw: (once(*a, **kw), once(*a, **kw))[1])

    def append_twice(path: Path, line: str) -> None:
        append(path, line)
        append(shadow / path.name, line)

    class Rows(table):  # type: ignore[misc]
        def __init__(self, path: Path, replay: Any) -> None:
            super().__init__(path, replay)
            self.shadow = table(shadow / path.name, replay)

        def add(self, records: Any) -> None:
            records = list(records)
            super().add(records)
            self.shadow.add(records)

        def close(self) -> Any:
            self.shadow.close()
            return super().close()

        def discard(self) -> None:
            self.shadow.discard()
            super().discard()

    own_json = types.SimpleNamespace(dumps=json.dumps)
    twice(own_json, "dumps")
    setattr(writer, "json", own_json)  # the journal's JSON (the writer's only use of json)  # noqa: B010
    journal.append_line = append_twice
    inputrows.Rows = Rows  # type: ignore[misc]
    twice(inputrows, "kept_in_manifest")
    for name in ("input_records", "frame_notes"):
        twice(capture_run, name)
    twice(classfolders, "note")


def me(kind: str, *args: object) -> list[str]:
    """This script as the floor's process."""
    return [sys.executable, str(Path(__file__).resolve()), "--worker", kind, *map(str, args)]


def make_shards(folder: Path, images: Path, count: int) -> list[Path]:
    """The photos of ``images`` in ``count`` tar shards, in order, each sample ``KEY.png`` + ``KEY.cls``."""
    files = sorted(images.iterdir())
    folder.mkdir()
    shards = []
    for s in range(count):
        shard = folder / f"train-{s:03d}.tar"
        with tarfile.open(shard, "w") as tar:
            for i, photo in list(enumerate(files))[s * len(files) // count : (s + 1) * len(files) // count]:
                for name, data in ((f"{i:06d}.png", photo.read_bytes()), (f"{i:06d}.cls", b"0")):
                    member = tarfile.TarInfo(name)
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
        shards.append(shard)
    return shards


def tiny(folder: Path, count: int) -> Path:
    """``count`` 16x16 PNG photos, each its own (seeded noise)."""
    import numpy as np
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / f"{i:06d}.png")
    return folder


def tar_against_files(work: Path, args: argparse.Namespace) -> None:
    """The photos as files, as tar shards, and the plain loop over the shards, round by round; medians."""
    images = photos(work / "photos", args.images)
    shards = make_shards(work / "shards", images, args.shards)
    brace = str(work / "shards" / f"train-{{000..{args.shards - 1:03d}}}.tar")
    common = ["-m", "resnet18", "-l", "layer4", "--reduce", "mean", "--batch-size", str(args.batch), "-q"]
    cases = {
        "files": [HOOKDUMP, "capture", *common, str(images), "-o", str(work / "out-files")],
        "tar": [HOOKDUMP, "capture", *common, brace, "-o", str(work / "out-tar")],
        "floor": me("floor", ",".join(map(str, shards)), work / "floor.npy", args.batch),
    }
    walls: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(args.rounds):
        for name, cmd in cases.items():
            for old in work.glob("out-*"):
                shutil.rmtree(old)
            walls[name].append(run(cmd)[0])
            print(f"  round {r + 1}/{args.rounds} {name}: {walls[name][-1]:.1f}s", file=sys.stderr)
    median = {name: statistics.median(w for w in v if not math.isnan(w)) for name, v in walls.items()}
    print(f"{args.images} photos in {args.shards} shards, batch {args.batch}, {args.rounds} rounds:")
    for name, seconds in median.items():
        rate, ratio = args.images / seconds, seconds / median["files"]
        print(f"  {name:6s} {seconds:7.2f} s  {rate:7.1f} images/s  {ratio:.2f}x files")
    tar, files, floor = median["tar"], median["files"], median["floor"]
    print(f"  tar / files = {tar / files:.3f} (goal <= 1.05); tar / floor = {tar / floor:.2f}")


def records_cost(work: Path, count: int, rounds: int) -> None:
    """The inputs' records' cost at ``count`` tiny inputs: a whole capture, and one killed halfway then
    resumed (``--resume`` hashes the inputs already captured again), ``rounds`` times each; medians of
    what ``HOOKDUMP_PROFILE`` says (``records``, ``resume check``) over the process's wall time."""
    folder = tiny(work / "tiny", count)
    out = work / "out-tiny"
    case = [HOOKDUMP, "capture", "-m", "test_resnet", "--input-size", "3,16,16", "-l", "layer1", "--reduce",
            "mean", "--batch-size", "256", str(folder), "-o", str(out), "-q"]  # fmt: skip
    half = {**os.environ, "HOOKDUMP_TEST_KILL_AT": f"checkpoint-{math.ceil(count / 256) // 2}"}
    for r in range(rounds):
        shutil.rmtree(out, ignore_errors=True)
        cpu = run(case, "whole")[2]
        PROFILES["whole"][-1] |= {"inputs": count, "cpu": cpu}
        sizes = (out / "manifest.json").stat().st_size, (out / "inputs.parquet").stat().st_size
        shutil.rmtree(out)
        subprocess.run(case, env=half, capture_output=True)  # SIGKILLed after half the batches
        done = len((out / ".hookdump-partial" / "inputs.jsonl").read_text().splitlines()) * 256
        cpu = run([*case, "--resume"], "resumed")[2]
        PROFILES["resumed"][-1] |= {"inputs": count - done, "cpu": cpu}  # the inputs this run decoded
        print(
            f"  round {r + 1}/{rounds} records: {PROFILES['resumed'][-1]['wall']:.1f}s resumed",
            file=sys.stderr,
        )
    hashing = _hashing(folder)
    print(f"{count} tiny inputs (16x16 PNG, test_resnet, batch 256), {rounds} rounds, medians:")
    print(f"  manifest.json {sizes[0]:,} bytes, inputs.parquet {sizes[1] / 1e6:.1f} MB")
    for case_name, parts in (("whole", ("records",)), ("resumed", ("records", "resume check"))):
        found = PROFILES[case_name]
        wall = statistics.median(p["wall"] for p in found)
        said = ", ".join(
            f"{part} {statistics.median(p.get(part, 0.0) for p in found):.2f} s"
            f" (CPU {statistics.median(p.get(f'{part} cpu', 0.0) for p in found):.2f} s)"
            for part in parts
        )
        span = statistics.median(sum(p.get(part, 0.0) for part in parts) / p["wall"] for p in found)
        spent = [sum(p.get(f"{part} cpu", 0.0) for part in parts) + hashing * p["inputs"] for p in found]
        cpu = statistics.median(s / p["wall"] for s, p in zip(spent, found, strict=True))
        of_cpu = statistics.median(s / p["cpu"] for s, p in zip(spent, found, strict=True))
        setup = statistics.median(p.get("setup", 0.0) for p in found)
        print(f"  {case_name:8s} {wall:6.1f} s wall, setup {setup:.2f} s; {said}")
        print(
            f"{'':11s}records' CPU (and the workers' hashing): {100 * cpu:.2f}% of the wall (goal < 2%);"
            f" {100 * of_cpu:.2f}% of the run's CPU time (every process); their spans' wall time:"
            f" {100 * span:.2f}%"
        )
    print(f"  the workers' sha256 of an input's bytes: {hashing * 1e6:.1f} us (counted above, an input each)")


def records_marginal(work: Path, count: int, rounds: int) -> None:
    """The records' cost measured by what it does to the wall time: the whole capture of ``count`` tiny
    inputs with their records' work done once and twice (``capture_worker``), in paired rounds whose order
    alternates; the median of the rounds' differences, and their spread."""
    folder = work / "tiny" if (work / "tiny").is_dir() else tiny(work / "tiny", count)
    out = work / "out-marginal"
    args = ["capture", "-m", "test_resnet", "--input-size", "3,16,16", "-l", "layer1", "--reduce", "mean",
            "--batch-size", "256", str(folder), "-o", str(out), "-q"]  # fmt: skip
    walls: dict[str, list[float]] = {"once": [], "twice": []}
    shadow = work / "shadow"
    os.environ["HOOKDUMP_BENCH_SHADOW"] = str(shadow)
    for r in range(rounds):
        for case in ("once", "twice") if r % 2 == 0 else ("twice", "once"):
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(shadow, ignore_errors=True)
            shadow.mkdir()
            walls[case].append(run(me(case, *args))[0])
        print(f"  round {r + 1}/{rounds} once {walls['once'][-1]:.1f}s, twice {walls['twice'][-1]:.1f}s",
              file=sys.stderr)  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    once = statistics.median(walls["once"])
    shares = sorted(100 * (t - o) / o for o, t in zip(walls["once"], walls["twice"], strict=True))
    mean = statistics.mean(shares)
    error = statistics.stdev(shares) / math.sqrt(rounds) if rounds > 1 else math.nan
    hashing = 100 * _hashing(folder) * count / once  # in the decoding workers: not doubled, counted whole
    print(f"the records' work done twice against once, {count} tiny inputs, {rounds} paired rounds:")
    print(f"  once {once:.1f} s, twice {statistics.median(walls['twice']):.1f} s (medians)")
    print(
        f"  what a second copy of the work adds: {statistics.median(shares):+.2f}% of the wall (median of the"
        f" rounds' differences; they range {shares[0]:+.2f}% to {shares[-1]:+.2f}%, their mean"
        f" {mean:+.2f}% with a standard error of {error:.2f}%); with the workers'"
        f" hashing ({hashing:.2f}%): {statistics.median(shares) + hashing:.2f}% (goal < 2%)"
    )


def _hashing(folder: Path, sample: int = 2000) -> float:
    """Seconds the decoding worker spends hashing one tiny input's bytes (read already, to decode them)."""
    import hashlib
    import time

    blobs = [p.read_bytes() for p in sorted(folder.iterdir())[:sample]]
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for blob in blobs:
            hashlib.sha256(blob).hexdigest()
        times.append((time.perf_counter() - start) / len(blobs))
    return statistics.median(times)


def preflight_cost(work: Path, count: int, rounds: int) -> None:
    """The preflight's checks of ``count`` tiny inputs (the walk and each header; ``--dry-run``'s decoding
    too) spread over forked processes against one process, in this process, rounds alternating; medians."""
    import time

    from hookdump.inputs import files, forks
    from hookdump.inputs.spec import InputSpec

    folder = work / "tiny" if (work / "tiny").is_dir() else tiny(work / "tiny", count)
    spread, config = forks.AT_LEAST, {"input_size": (3, 16, 16), "mean": (0.5,) * 3, "std": (0.5,) * 3}
    times: dict[str, list[float]] = {}
    files.collect(InputSpec((str(folder),)))  # the files in the page cache
    for _ in range(rounds):
        for case, at_least in (("one process", 1 << 62), ("forked", spread)):
            forks.AT_LEAST = at_least
            start = time.perf_counter()
            paths = files.collect(InputSpec((str(folder),)))
            middle = time.perf_counter()
            files.decode_all(paths, config, None)
            times.setdefault(f"{case} headers", []).append(middle - start)
            times.setdefault(f"{case} decoding", []).append(time.perf_counter() - middle)
    forks.AT_LEAST = spread
    said = f"{forks.processes(count)} processes"
    print(f"the preflight of {count} tiny inputs ({said}), {rounds} rounds, medians:")
    for what in ("headers", "decoding"):
        one, forked = (statistics.median(times[f"{case} {what}"]) for case in ("one process", "forked"))
        print(f"  {what:9s} one process {one:6.2f} s, forked {forked:6.2f} s: {one / forked:.2f}x")


def main() -> None:
    if sys.argv[1:2] == ["--worker"] and sys.argv[2] in ("once", "twice"):  # (its arguments are hookdump's)
        capture_worker(sys.argv[2] == "twice", sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--preflight", type=int, default=0)
    parser.add_argument("--marginal", type=int, default=0)
    parser.add_argument("--worker", nargs="+")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1:])
        return
    with tempfile.TemporaryDirectory(prefix="hookdump-bench-inputs-") as tmp:
        work = Path(tmp)
        if args.images:
            tar_against_files(work, args)
        if args.records and args.rounds:
            records_cost(work, args.records, args.rounds)
        if args.records and args.marginal:
            records_marginal(work, args.records, args.marginal)
        if args.preflight:
            preflight_cost(work, args.preflight, args.rounds)


if __name__ == "__main__":
    main()
