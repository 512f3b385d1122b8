"""What a second thread costs twins_svt_large's forward on this machine, each case a fresh process with
hookdump's process settings, random input (no decoding), batches of 32; the table's ``forward s`` is the
median of a run's batches' forward seconds (the first batch left out: one-off allocations), ``x forward``
its ratio to the bare forward's, rounds interleaved, medians.

    .venv/bin/python scripts/bench/threads.py [--rounds 3] [--batches 3] [--cases i,nhw,nhd,nhsd]

Cases (letters combined): ``i`` the bare forward under ``inference_mode``, ``n`` under ``no_grad``
(hookdump's); ``h`` hooks on issue 46's 28 layers that clone; ``s`` a thread computing each clone's stats
(``Accumulator``) as it comes; ``w`` a thread writing each clone through the page cache (``tofile``), ``d``
one writing them as hookdump's writer does (``AppendFile``: past the page cache, ``O_DIRECT``, where the
file system allows it).
``--quick``: one round of ``i`` and ``nhsw``, 2 batches."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import statistics
import threading
import time
from pathlib import Path

import harness
from loops import layer_names
from memory import QUEUE_ROWS

CASES = "i,n,nh,nhs,nhw,nhsw,nhd,nhsd"


def case(v: str, folder: str, batches: int) -> None:
    from hookdump.cli.process import give_back, keep_freed_memory, short_spin

    keep_freed_memory()
    short_spin()  # before torch is imported
    import timm
    import torch

    from hookdump.store.formats.appendfile import AppendFile
    from hookdump.store.formats.stats import Accumulator

    torch.manual_seed(0)
    name, layers = QUEUE_ROWS["twins"]
    model = timm.create_model(name).eval()
    modules = dict(model.named_modules())
    names = layer_names(list(modules), layers)
    todo: queue.Queue[torch.Tensor | None] = queue.Queue()
    beside = any(letter in v for letter in "swd")  # a second thread takes the clones

    def work() -> None:  # (into the harness's temporary folder)
        here = Path(folder)
        with (
            open(here / "out.bin", "wb") as f,
            contextlib.closing(AppendFile(here / "direct.bin", True)) as d,
        ):
            while (t := todo.get()) is not None:
                if "s" in v:
                    Accumulator().update(t)
                if "w" in v:
                    t.numpy().tofile(f)
                if "d" in v:
                    d.append(memoryview(t.numpy()))

    thread = threading.Thread(target=work)
    thread.start()
    kept: list[torch.Tensor] = []

    def hook(module: object, args: object, output: torch.Tensor) -> None:
        kept.append(output.detach().clone())
        if beside:
            todo.put(kept[-1])

    if "h" in v:
        for n in names:
            modules[n].register_forward_hook(hook)
    x = torch.randn(32, 3, 224, 224)
    times = []
    with torch.inference_mode() if "i" in v else torch.no_grad():
        for _ in range(batches):
            start = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - start)
            kept.clear()
            give_back()
    todo.put(None)
    thread.join()
    target = os.environ.get("HOOKDUMP_PROFILE")
    if target:  # the batches' forward seconds, the first left out, as the run's figure
        Path(target).write_text(json.dumps({"forward": statistics.median(times[1:] or times)}))
    os._exit(0)


def main() -> None:
    found = harness.worker()
    if found is not None:
        v, (folder, batches) = found
        case(v, folder, int(batches))
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--batches", type=int, default=3, help="batches of 32 a run")
    options.add_argument("--cases", default=CASES, help="the cases, comma-separated")
    args = harness.parse(options, quick={"rounds": 1, "batches": 2, "cases": "i,nhsw"})
    with harness.workdir("hookdump-threads-") as work:
        cases = {
            v: lambda v=v: harness.process(
                harness.me(__file__, v, work, args.batches), profile=True, check=True
            )
            for v in args.cases.split(",")
        }
        columns = [harness.Column("forward s", "forward"), harness.Column("x forward", "forward", ratio=True)]
        title = f"twins_svt_large forward, batch 32, {args.batches} batches a run, a second thread beside it"
        harness.table(title, harness.rounds(cases, args.rounds), args.cases.split(",")[0], columns)


if __name__ == "__main__":
    main()
