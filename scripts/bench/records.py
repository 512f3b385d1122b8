"""The inputs' records' cost (issue 38): their journal, ``inputs.parquet`` and the resume check, at
``--records N`` tiny photos (16x16, a 3x16x16 input to ``test_resnet``, ``-l layer1 --reduce mean
--batch-size 256``), fresh processes.

* ``whole`` (the baseline) and ``resumed`` (killed halfway, then ``--resume``d: it hashes the inputs
  already captured again), ``--rounds`` rounds: the manifest's and the table's sizes, and what the records
  cost as a share of the wall time: their CPU time (``HOOKDUMP_PROFILE``'s ``records cpu``, ``resume check
  cpu``, and the workers' sha256 of each input's bytes, timed here), and the wall time of their spans (an
  upper bound: it counts the journal's fsync and the writer thread's waits for the interpreter while the
  model runs); goal under 2%, with a manifest under 1 MB (``--rounds 0``: not run).
* ``--marginal R``: the records' cost by its effect: R paired rounds (the order alternating) of the whole
  capture with the records' work in the main process done once (the baseline) and done twice (patched in
  this script's own process, the second copy into a folder of its own); the difference is what one copy
  costs the wall time.
* ``--preflight``: the preflight's checks of the N tiny inputs (each header, and ``--dry-run``'s decoding)
  spread over forked processes (the baseline) against one process, in this process, ``--rounds`` rounds.

``--quick``: 600 inputs (three batches), one round, two paired rounds, the preflight too.

    .venv/bin/python scripts/bench/records.py [--records 100000] [--rounds 3] [--marginal 0] [--preflight]
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import harness
from photos import tiny

SPANS = [harness.Column(f"{span} s", span) for span in ("setup", "records", "records cpu", "resume check")]


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


def capture(folder: Path, out: Path) -> list[object]:
    """The capture of the tiny inputs in ``folder`` (without the command's name)."""
    return ["capture", "-m", "test_resnet", "--input-size", "3,16,16", "-l", "layer1", "--reduce", "mean",
            "--batch-size", "256", folder, "-o", out, "-q"]  # fmt: skip


def records_cost(work: Path, count: int, rounds: int) -> None:
    """A whole capture and one killed halfway then resumed, ``rounds`` times each; medians of what
    ``HOOKDUMP_PROFILE`` says (``records``, ``resume check``) over the process's wall time."""
    folder, out = work / "tiny", work / "out-tiny"
    case = [harness.HOOKDUMP, *capture(folder, out)]
    sizes: list[int] = []

    def whole() -> harness.Run:
        run = harness.process(case, profile=True, out=out)
        sizes[:] = [(out / name).stat().st_size for name in ("manifest.json", "inputs.parquet")]
        run.figures["inputs"] = count
        return run

    def resumed() -> harness.Run:
        half = {"HOOKDUMP_TEST_KILL_AT": f"checkpoint-{math.ceil(count / 256) // 2}"}
        shutil.rmtree(out, ignore_errors=True)
        harness.process(case, half, ok=(-9,))  # SIGKILLed after half the batches
        done = len((out / ".hookdump-partial" / "inputs.jsonl").read_text().splitlines()) * 256
        run = harness.process([*case, "--resume"], profile=True)
        shutil.rmtree(out, ignore_errors=True)
        run.figures["inputs"] = count - done  # the inputs this run decoded
        return run

    results = harness.rounds({"whole": whole, "resumed": resumed}, rounds)
    hashing = _hashing(folder)
    notes = [f"manifest.json {sizes[0]:,} bytes, inputs.parquet {sizes[1] / 1e6:.1f} MB"]
    for name, parts in (("whole", ("records",)), ("resumed", ("records", "resume check"))):
        found = [r for r in results[name] if r.figures]
        span = statistics.median(sum(r.figures.get(part, 0.0) for part in parts) / r.wall for r in found)
        spent = [sum(r.figures.get(f"{part} cpu", 0.0) for part in parts) + hashing * r.figures["inputs"]
                 for r in found]  # fmt: skip
        cpu = statistics.median(s / r.wall for s, r in zip(spent, found, strict=True))
        of_cpu = statistics.median(s / r.value("cpu") for s, r in zip(spent, found, strict=True))
        notes.append(f"{name}: records' CPU (and the workers' hashing): {100 * cpu:.2f}% of the wall (goal <"
                     f" 2%); {100 * of_cpu:.2f}% of the run's CPU time (every process); their spans' wall"
                     f" time: {100 * span:.2f}%")  # fmt: skip
    notes.append(
        f"the workers' sha256 of an input's bytes: {hashing * 1e6:.1f} us (counted above, an input each)"
    )
    title = f"{count} tiny inputs (16x16 PNG, test_resnet, batch 256)"
    harness.table(
        title, results, "whole", [*SPANS, harness.Column("resume check cpu s", "resume check cpu")], notes
    )


def records_marginal(work: Path, count: int, rounds: int) -> None:
    """The whole capture with the records' work done once and twice (``capture_worker``), in paired rounds
    whose order alternates; the median of the rounds' differences, and their spread."""
    folder, out, shadow = work / "tiny", work / "out-marginal", work / "shadow"

    def case(kind: str) -> harness.Run:
        shutil.rmtree(shadow, ignore_errors=True)
        shadow.mkdir()
        return harness.process(harness.me(__file__, kind, *capture(folder, out)),
                               {"HOOKDUMP_BENCH_SHADOW": str(shadow)}, out=out)  # fmt: skip

    cases = {"once": lambda: case("once"), "twice": lambda: case("twice")}
    results = harness.rounds(cases, rounds, alternate=True)
    once = harness.stat(results["once"], "wall")
    pairs = zip(results["once"], results["twice"], strict=True)
    shares = sorted(100 * (t.wall - o.wall) / o.wall for o, t in pairs)
    mean = statistics.mean(shares)
    error = statistics.stdev(shares) / math.sqrt(rounds) if rounds > 1 else math.nan
    hashing = 100 * _hashing(folder) * count / once  # in the decoding workers: not doubled, counted whole
    notes = [f"what a second copy of the work adds: {statistics.median(shares):+.2f}% of the wall (median of"
             f" the rounds' differences; they range {shares[0]:+.2f}% to {shares[-1]:+.2f}%, their mean"
             f" {mean:+.2f}% with a standard error of {error:.2f}%); with the workers' hashing"
             f" ({hashing:.2f}%): {statistics.median(shares) + hashing:.2f}% (goal < 2%)"]  # fmt: skip
    title = f"the records' work done twice against once, {count} tiny inputs, paired rounds"
    harness.table(title, results, "once", notes=notes)


def _hashing(folder: Path, sample: int = 2000) -> float:
    """Seconds the decoding worker spends hashing one tiny input's bytes (read already, to decode them)."""
    import hashlib

    blobs = [p.read_bytes() for p in sorted(folder.iterdir())[:sample]]
    runs = [harness.timed(lambda: [hashlib.sha256(blob).hexdigest() for blob in blobs]) for _ in range(5)]
    return harness.stat(runs, "wall") / len(blobs)


def preflight_cost(work: Path, count: int, rounds: int) -> None:
    """The preflight's checks (the walk and each header; ``--dry-run``'s decoding too) spread over forked
    processes against one process, in this process, rounds alternating; medians."""
    from hookdump.inputs import files, forks
    from hookdump.inputs.spec import InputSpec

    folder = work / "tiny"
    spread, config = forks.AT_LEAST, {"input_size": (3, 16, 16), "mean": (0.5,) * 3, "std": (0.5,) * 3}
    files.collect(InputSpec((str(folder),)))  # the files in the page cache

    def checks(at_least: int) -> harness.Run:
        forks.AT_LEAST = at_least
        spans = {}

        def both() -> None:
            start = time.perf_counter()
            paths = files.collect(InputSpec((str(folder),)))
            spans["headers"] = time.perf_counter() - start
            files.decode_all(paths, config, None)
            spans["decoding"] = time.perf_counter() - start - spans["headers"]

        run = harness.timed(both)
        run.figures = spans
        return run

    cases = {"one process": lambda: checks(1 << 62), "forked": lambda: checks(spread)}
    results = harness.rounds(cases, rounds)
    forks.AT_LEAST = spread
    columns = [harness.Column(f"{what}{unit}", what, ratio=unit == " x") for what in ("headers", "decoding")
               for unit in (" s", " x")]  # fmt: skip
    title = f"the preflight of {count} tiny inputs ({forks.processes(count)} processes)"
    harness.table(title, results, "forked", columns)


def main() -> None:
    if found := harness.worker():  # (its arguments are hookdump's)
        return capture_worker(found[0] == "twice", found[1])
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--records", type=int, default=100000, help="tiny inputs")
    options.add_argument("--marginal", type=int, default=0, help="paired rounds of the records done twice")
    options.add_argument("--preflight", action="store_true", help="the preflight's checks, forked or not")
    args = harness.parse(options, quick={"records": 600, "rounds": 1, "marginal": 2, "preflight": True})
    with harness.workdir("hookdump-bench-records-") as work:
        tiny(work / "tiny", args.records)
        if args.rounds:
            records_cost(work, args.records, args.rounds)
        if args.marginal:
            records_marginal(work, args.records, args.marginal)
        if args.preflight:
            preflight_cost(work, args.records, max(args.rounds, 1))


if __name__ == "__main__":
    main()
