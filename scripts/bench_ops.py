"""What capturing a value inside a module's forward (``-l 'blocks.6:add_1'``) costs, side by side in one run.

For each model, one batch (seeded random weights, eval mode, no_grad), the cases take turns round by round
(this machine is shared and noisy: read the medians and the ratios):

* ``plain``: the forward pass alone;
* ``module``: hookdump's recorder keeping the output of one block (``blocks.6`` of vit_small_patch16_224,
  ``layer3.5`` of resnet50);
* ``op``: hookdump's recorder keeping one op of that block's own forward (``blocks.6:add_1``, the block's
  last residual add; ``layer3.5:add``, the BasicBlock's ``out += shortcut``), the op watch entered only while
  that block runs;
* ``mode on``: a torch function mode naming every op of every module for the whole forward (what the
  scoped watch avoids), for scale;
* ``torchlens``: ``torchlens.trace`` of the same forward, which logs every op, and from which the same value
  is read.

The values of ``op`` and ``torchlens`` are checked to be equal before anything is timed. The figure the issue
asks for is ``op / module`` (goal: at most 1.05).

    python scripts/bench_ops.py [--rounds 15] [--batch 8] [--models vit_small_patch16_224,resnet50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from hookdump import api
from hookdump.capture.recorder import Recorder
from hookdump.model.ops import OpWatch, base_of, op_name

CASES = {"vit_small_patch16_224": ("blocks.6", "add_1"), "resnet50": ("layer3.5", "add")}


def _recorder(model: torch.nn.Module, name: str, layer: str) -> Recorder:
    """hookdump's recorder for ``layer`` (a module path or ``PATH:OP``), planned as ``capture`` plans it."""
    found = api.plan([layer], model=name, input_size=(3, 224, 224))
    inventory = found.tree.inventory
    ops = {t.path: op for t in found.targets if (op := inventory.op(t.path)) is not None}
    return Recorder(model, found.targets, op_values=ops)


def _run_recorder(model: torch.nn.Module, name: str, layer: str, x: torch.Tensor) -> Callable[[], object]:
    recorder = _recorder(model, name, layer)

    def run() -> object:
        with recorder:
            recorder.run(x, name)
            return recorder.drain()

    return run


def _mode_on(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def run() -> object:
        watch = OpWatch(lambda frame, label, result, inplace: None)
        with watch.watching(model), watch:
            return model(x)

    return run


def _lens_value(model: torch.nn.Module, x: torch.Tensor, module: str, op: str) -> torch.Tensor:
    import torchlens

    log = torchlens.trace(model, x)
    found = [
        log.ops[label].tensor
        for label in log.op_labels
        if log.ops[label].module == f"{module}:1"
        and log.ops[label].func is not None
        and (named := op_name(log.ops[label].func)) is not None
        and named[0] == base_of(op)
    ]
    return found[0 if op == base_of(op) else int(op.rsplit("_", 1)[1])]


def bench(name: str, rounds: int, batch: int) -> None:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    x = torch.randn(batch, 3, 224, 224)
    module, op = CASES[name]
    with torch.no_grad():
        value = _run_recorder(model, name, f"{module}:{op}", x)()
        mine = next(iter(value.values()))  # type: ignore[attr-defined]
        theirs = _lens_value(model, x, module, op)
        assert torch.equal(mine, theirs), f"{name}: torchlens' value differs"
    cases: dict[str, Callable[[], object]] = {
        "plain": lambda: model(x),
        "module": _run_recorder(model, name, module, x),
        "op": _run_recorder(model, name, f"{module}:{op}", x),
        "mode on": _mode_on(model, x),
    }
    import torchlens

    cases["torchlens"] = lambda: torchlens.trace(model, x)
    times: dict[str, list[float]] = {case: [] for case in cases}
    with torch.no_grad():
        for case in cases.values():  # warm up
            case()
        for _ in range(rounds):
            for case, run in cases.items():
                start = time.perf_counter()
                run()
                times[case].append(time.perf_counter() - start)
    median = {case: statistics.median(t) for case, t in times.items()}
    print(
        f"\n{name}, batch {batch}, {rounds} rounds ({module}:{op} vs {module});"
        " median seconds, ratio to plain:"
    )
    for case, seconds in median.items():
        print(f"  {case:10s} {seconds:8.4f} s  {seconds / median['plain']:5.2f}x")
    print(f"  op / module = {median['op'] / median['module']:.3f}  (goal <= 1.05)")
    print(f"  torchlens / op = {median['torchlens'] / median['op']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--models", default=",".join(CASES))
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in args.models.split(","):
        bench(name, args.rounds, args.batch)


if __name__ == "__main__":
    main()
