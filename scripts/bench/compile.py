"""Would ``--compile`` pay (issue 22, item 4)? ``torch.compile`` of a hooked model against the same model run
eagerly, on the CPU, in one process: end-to-end time including compilation, the values' largest
difference, and the graph breaks (``torch._dynamo.explain``).

The model is resnet50 (seeded random weights) with hookdump's kind of hooks on ``layer1`` .. ``layer4``
(each output copied at hook time into a dict); inputs are seeded random batches (decoding is the same for
both, so it is left out). The compiled model is ``torch.compile(model)`` with the hooks registered first,
which dynamo traces into the graph. Eager and compiled take turns batch by batch after the compiled one's
first call (its compilation, timed on its own), so the machine's noise falls on both. ``--recorder`` first
counts the graph breaks with hookdump's own hooks (``capture.recorder.Recorder``, as a capture sets it
up: version counters read, the early stop raised after the last layer) instead of plain cloning ones.

``--end-to-end 256,2048`` instead times the console script itself at each size: ``hookdump capture`` of
that many photos (scikit-image's, cycled, as ``bench_dataset.py`` makes them) without ``--compile``, with it
and inductor's cache empty (a fresh ``TORCHINDUCTOR_CACHE_DIR``), and with it again on that warm cache; wall
seconds (``bench_dataset.run``: ``/usr/bin/time -v``), peak RSS, and each against the eager run.

    python scripts/bench_compile.py [--images 256] [--batch 32] [--model resnet50] [--recorder]
    python scripts/bench_compile.py --end-to-end 256,2048 [--batch 32] [--model resnet50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--layers", default="layer1,layer2,layer3,layer4")
    parser.add_argument("--recorder", action="store_true", help="graph breaks with hookdump's own hooks")
    parser.add_argument("--end-to-end", help="comma-separated photo counts: the console script, timed")
    args = parser.parse_args()
    if args.end_to_end:
        return end_to_end([int(n) for n in args.end_to_end.split(",")], args.model, args.layers, args.batch)
    import timm
    import torch

    if args.recorder:
        recorder_breaks(args.model, args.layers.split(","), args.batch)

    torch.manual_seed(0)
    model = timm.create_model(args.model).eval()
    kept: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())
    for name in args.layers.split(","):

        def hook(module: Any, inputs: Any, output: torch.Tensor, name: str = name) -> None:
            kept[name] = output.detach().clone()

        modules[name].register_forward_hook(hook)
    batches = max(1, args.images // args.batch)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, 224, 224, generator=generator)
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(x)
        torch._dynamo.reset()
        print(f"graphs {explained.graph_count}, graph breaks {explained.graph_break_count}")
        for reason in explained.break_reasons[:5]:
            print(f"  break: {reason.reason}")
        compiled = torch.compile(model)
        start = time.perf_counter()
        compiled(x)
        first = time.perf_counter() - start
        got = {k: v.clone() for k, v in kept.items()}
        model(x)
        worst = max(
            float((got[k] - kept[k]).abs().max()) / max(float(kept[k].abs().max()), 1e-12) for k in kept
        )
        eager_s, compiled_s = [], []
        for _ in range(batches - 1):
            for fn, times in ((model, eager_s), (compiled, compiled_s)):
                start = time.perf_counter()
                fn(x)
                times.append(time.perf_counter() - start)
    eager_batch = statistics.median(eager_s) if eager_s else first
    compiled_batch = statistics.median(compiled_s) if compiled_s else first
    print(f"first compiled call (compilation + one batch of {args.batch}): {first:.1f} s")
    print(f"per batch, medians of {len(eager_s)}: eager {eager_batch:.2f} s, compiled {compiled_batch:.2f} s"
          f" ({compiled_batch / eager_batch:.2f}x)")  # fmt: skip
    print(f"largest relative difference compiled vs eager: {worst:.1e}")
    for images in sorted({args.images, 2048, 10000}):
        n = max(1, images // args.batch)
        eager_total = n * eager_batch
        compiled_total = first + (n - 1) * compiled_batch
        ratio = compiled_total / eager_total
        print(f"{images} images, end to end (forward only, from the batches measured): eager"
              f" {eager_total:.0f} s, compiled {compiled_total:.0f} s ({ratio:.2f}x)")  # fmt: skip


def end_to_end(sizes: list[int], model: str, layers: str, batch: int) -> None:
    """``hookdump capture`` eager, compiled on a cold cache and compiled on a warm one, at each size."""
    from bench_dataset import hookdump, photos, run  # scripts/ is on sys.path; it loads the photo code

    work = Path(tempfile.mkdtemp(prefix="hookdump-compile-e2e-"))
    layer_args = [arg for name in layers.split(",") for arg in ("-l", name)]
    try:
        for size in sizes:
            folder = photos(work / f"images-{size}", size)
            cache = work / f"inductor-{size}"  # empty: the first compiled run compiles from nothing
            common = [folder, "-m", model, *layer_args, "--batch-size", batch, "-o", work / "out", "-q"]
            walls: dict[str, tuple[float, float]] = {}
            for case, extra in (("eager", []), ("compiled, cold cache", ["--compile"]),
                                ("compiled, warm cache", ["--compile"])):  # fmt: skip
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
                shutil.rmtree(work / "out", ignore_errors=True)
                wall, rss, _, _ = run(hookdump(*common, *extra))
                walls[case] = (wall, rss)
            eager = walls["eager"][0]
            print(f"{model} {layers}, {size} photos, batch {batch}, end to end (hookdump capture):")
            for case, (wall, rss) in walls.items():
                print(f"  {case:22} {wall:7.1f} s  x eager {wall / eager:.2f}  peak RSS {rss:.0f} MB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def recorder_breaks(model_name: str, layers: list[str], batch: int) -> None:
    """``torch._dynamo.explain`` of the model inside hookdump's Recorder, set up as a capture sets it up."""
    import torch

    from hookdump import api
    from hookdump.capture.run import _recorder

    out = Path(tempfile.mkdtemp(prefix="hookdump-compile-")) / "plan"  # checked by the plan, never written
    found = api.plan(layers, model=model_name, input_size=(3, 224, 224), out=out)
    assert found.load is not None
    net, _ = found.load()
    net.eval()
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with _recorder(net, found) as recorder, torch.no_grad():
        try:
            explained = torch._dynamo.explain(recorder.model)(x)
        except BaseException as exc:  # the early stop's exception, raised from a hook inside the graph
            torch._dynamo.reset()
            print(f"with hookdump's Recorder hooks: the trace stopped with {type(exc).__name__}: {exc}")
            return
    torch._dynamo.reset()
    print(f"with hookdump's Recorder hooks: graphs {explained.graph_count}, graph breaks"
          f" {explained.graph_break_count}")  # fmt: skip
    for reason in explained.break_reasons[:5]:
        print(f"  break: {reason.reason}")


if __name__ == "__main__":
    main()
