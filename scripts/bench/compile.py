"""Would ``--compile`` pay (issue 22, item 4)? ``torch.compile`` of a hooked model against the same model run
eagerly (the baseline), on the CPU, in one process: end-to-end time including compilation, the values'
largest difference, and the graph breaks (``torch._dynamo.explain``).

The model is resnet50 (seeded random weights) with hookdump's kind of hooks on ``layer1`` .. ``layer4``
(each output copied at hook time into a dict); inputs are seeded random batches (decoding is the same for
both, so it is left out). The compiled model is ``torch.compile(model)`` with the hooks registered first,
which dynamo traces into the graph. Eager and compiled take turns batch by batch after the compiled one's
first call (its compilation, from an empty inductor cache, timed on its own), so the machine's noise falls
on both (``--rounds``: the batches timed, by default ``--images / --batch - 1``). ``--recorder`` first
counts the graph breaks with hookdump's own hooks (``capture.recorder.Recorder``, as a capture sets it up:
version counters read, the early stop raised after the last layer) instead of plain cloning ones.

``--end-to-end 256,2048`` instead times the console script itself at each size: ``hookdump capture`` of
that many photos (scikit-image's, cycled, as the dataset benchmark makes them) without ``--compile``, with
it and inductor's cache empty (a fresh ``TORCHINDUCTOR_CACHE_DIR`` each round), and with it again on that
warm cache; fresh processes, wall seconds, peak RSS, each against the eager run (``--rounds``, default 1).
``--quick``: timm's tiny ``test_resnet``, batches of 2, 3 batches.

    python scripts/bench/compile.py [--images 256] [--batch 32] [--model resnet50] [--recorder]
    python scripts/bench/compile.py --end-to-end 256,2048 [--batch 32] [--model resnet50] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import harness
from photos import photos


def main() -> None:
    options = harness.parser(__doc__, rounds=0)
    options.add_argument("--images", type=int, default=256)
    options.add_argument("--batch", type=int, default=32)
    options.add_argument("--model", default="resnet50")
    options.add_argument("--layers", default="layer1,layer2,layer3,layer4")
    options.add_argument("--recorder", action="store_true", help="graph breaks with hookdump's own hooks")
    options.add_argument("--end-to-end", help="comma-separated photo counts: the console script, timed")
    args = harness.parse(options, quick={"images": 6, "batch": 2, "model": "test_resnet"})
    if args.end_to_end:
        return end_to_end(args)
    with harness.workdir("hookdump-compile-cache-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)  # empty: the first call compiles from nothing
        in_process(args)


def in_process(args: argparse.Namespace) -> None:
    """Eager against compiled, batch by batch in this process, after the compiled model's first call."""
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
    x = torch.randn(args.batch, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(x)
        torch._dynamo.reset()
        harness.say(f"graphs {explained.graph_count}, graph breaks {explained.graph_break_count}")
        for reason in explained.break_reasons[:5]:
            harness.say(f"  break: {reason.reason}")
        compiled = torch.compile(model)
        first = harness.timed(lambda: compiled(x)).wall
        got = {k: v.clone() for k, v in kept.items()}
        model(x)
        worst = max(
            float((got[k] - kept[k]).abs().max()) / max(float(kept[k].abs().max()), 1e-12) for k in kept
        )
        batches = args.rounds or max(1, args.images // args.batch - 1)
        results = harness.timings(
            {"eager": lambda: model(x), "compiled": lambda: compiled(x)}, batches, warm=False
        )
    eager_batch, compiled_batch = (harness.stat(results[case], "wall") for case in ("eager", "compiled"))
    notes = [f"first compiled call (compilation + one batch of {args.batch}): {first:.1f} s",
             f"largest relative difference compiled vs eager: {worst:.1e}"]  # fmt: skip
    for images in sorted({args.images, 2048, 10000}):
        n = max(1, images // args.batch)
        eager_total, compiled_total = n * eager_batch, first + (n - 1) * compiled_batch
        notes.append(f"{images} images, end to end (forward only, from the batches measured): eager"
                     f" {eager_total:.0f} s, compiled {compiled_total:.0f} s"
                     f" ({compiled_total / eager_total:.2f}x)")  # fmt: skip
    title = f"{args.model} {args.layers}, a batch of {args.batch} a round, in one process"
    harness.table(title, results, "eager", notes=notes)


def end_to_end(args: argparse.Namespace) -> None:
    """``hookdump capture`` eager, compiled on a cold cache and compiled on a warm one, at each size."""
    with harness.workdir("hookdump-compile-e2e-") as work:
        for size in [int(n) for n in args.end_to_end.split(",")]:
            one_size(args, work, size)


def one_size(args: argparse.Namespace, work: Path, size: int) -> None:
    """The three cases at ``size`` photos, ``--rounds`` rounds (1 by default), a fresh cache a round."""
    layer_args = [arg for name in args.layers.split(",") for arg in ("-l", name)]
    folder, out = photos(work / f"images-{size}", size), work / "out"
    cmd = [harness.HOOKDUMP, "capture", folder, "-m", args.model, *layer_args, "--batch-size", args.batch,
           "-o", out, "-q"]  # fmt: skip
    caches: list[Path] = []

    def compiled(cold: bool) -> harness.Run:
        if cold:  # empty: the first compiled run of a round compiles from nothing
            caches.append(work / f"inductor-{size}-{len(caches)}")
        return harness.process([*cmd, "--compile"], {"TORCHINDUCTOR_CACHE_DIR": str(caches[-1])}, out=out)

    cases = {
        "eager": lambda: harness.process(cmd, out=out),
        "compiled, cold cache": lambda: compiled(True),
        "compiled, warm cache": lambda: compiled(False),
    }
    title = f"{args.model} {args.layers}, {size} photos, batch {args.batch}, end to end (hookdump capture)"
    harness.table(title, harness.rounds(cases, args.rounds or 1), "eager")


def recorder_breaks(model_name: str, layers: list[str], batch: int) -> None:
    """``torch._dynamo.explain`` of the model inside hookdump's Recorder, set up as a capture sets it up."""
    import torch

    from hookdump import api
    from hookdump.capture import prepare

    with harness.workdir("hookdump-compile-") as work:
        found = api.plan(
            layers, model=model_name, input_size=(3, 224, 224), out=work / "plan"
        )  # never written
    assert found.load is not None
    net, _ = found.load()
    net.eval()
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with prepare.recorder(net, found) as recorder, torch.no_grad():
        try:
            explained = torch._dynamo.explain(recorder.model)(x)
        except BaseException as exc:  # the early stop's exception, raised from a hook inside the graph
            torch._dynamo.reset()
            harness.say(f"with hookdump's Recorder hooks: the trace stopped with {type(exc).__name__}: {exc}")
            return
    torch._dynamo.reset()
    harness.say(f"with hookdump's Recorder hooks: graphs {explained.graph_count}, graph breaks"
                f" {explained.graph_break_count}")  # fmt: skip
    for reason in explained.break_reasons[:5]:
        harness.say(f"  break: {reason.reason}")


if __name__ == "__main__":
    main()
