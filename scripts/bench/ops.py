"""What capturing a value inside a module's forward (``-l 'blocks.6:add_1'``) costs, side by side in one run.

For each model, one batch (seeded random weights, eval mode, no_grad), the cases take turns round by round
(this machine is shared and noisy: read the medians and the ratios):

* ``plain``: the forward pass alone (the baseline);
* ``module``: hookdump's recorder keeping the output of one block (``blocks.6`` of vit_small_patch16_224,
  ``layer3.5`` of resnet50);
* ``op``: hookdump's recorder keeping one op of that block's own forward (``blocks.6:add_1``, the block's
  last residual add; ``layer3.5:add``, the BasicBlock's ``out += shortcut``), the op watch entered only while
  that block runs;
* ``mode on``: a torch function mode naming every op of every module for the whole forward (what the
  scoped watch avoids), for scale;
* ``torchlens``: ``torchlens.trace`` of the same forward, which logs every op, and from which the same value
  is read (left out, with a line, when torchlens is not installed).

The values of ``op`` and ``torchlens`` are checked to be equal before anything is timed. The figure the issue
asks for is ``op / module`` (goal: at most 1.05). ``--quick``: vit_small_patch16_224, a batch of 1.

    python scripts/bench/ops.py [--rounds 15] [--batch 8] [--models vit_small_patch16_224,resnet50]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import harness

CASES = {"vit_small_patch16_224": ("blocks.6", "add_1"), "resnet50": ("layer3.5", "add")}


def _run_recorder(model: Any, name: str, layer: str, x: Any) -> Callable[[], object]:
    """hookdump's recorder for ``layer`` (a module path or ``PATH:OP``), planned as ``capture`` plans it."""
    from hookdump import api
    from hookdump.capture.recorder import Recorder

    found = api.plan([layer], model=name, input_size=(3, 224, 224))
    inventory = found.tree.inventory
    ops = {t.path: op for t in found.targets if (op := inventory.op(t.path)) is not None}
    recorder = Recorder(model, found.targets, op_values=ops)

    def run() -> object:
        with recorder:
            recorder.run(x, name)
            return recorder.drain()

    return run


def _mode_on(model: Any, x: Any) -> Callable[[], object]:
    from hookdump.model.ops import OpWatch

    def run() -> object:
        watch = OpWatch(lambda frame, label, result, inplace: None)
        with watch.watching(model), watch:
            return model(x)

    return run


def _lens_value(model: Any, x: Any, module: str, op: str) -> Any:
    import torchlens

    from hookdump.model.ops import base_of, op_name

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


def bench(name: str, rounds: int, batch: int, lens: bool) -> None:
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    x = torch.randn(batch, 3, 224, 224)
    module, op = CASES[name]
    cases: dict[str, Callable[[], object]] = {
        "plain": lambda: model(x),
        "module": _run_recorder(model, name, module, x),
        "op": _run_recorder(model, name, f"{module}:{op}", x),
        "mode on": _mode_on(model, x),
    }
    with torch.no_grad():
        if lens:
            import torchlens

            mine = next(iter(cases["op"]().values()))  # type: ignore[attr-defined]
            assert torch.equal(mine, _lens_value(model, x, module, op)), f"{name}: torchlens' value differs"
            cases["torchlens"] = lambda: torchlens.trace(model, x)
        results = harness.timings(cases, rounds)
    notes = [f"op / module = {harness.ratio(results, 'op', 'module'):.3f}  (goal <= 1.05)"]
    if lens:
        notes.append(f"torchlens / op = {harness.ratio(results, 'torchlens', 'op'):.1f}x")
    harness.table(
        f"{name}, batch {batch} ({module}:{op} vs {module})", results, "plain", notes=notes, digits=4
    )


def main() -> None:
    options = harness.parser(__doc__, rounds=15)
    options.add_argument("--batch", type=int, default=8)
    options.add_argument("--models", default=",".join(CASES))
    args = harness.parse(options, quick={"batch": 1, "models": "vit_small_patch16_224"})
    import torch

    harness.say(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    lens = harness.have("torchlens", "the torchlens row and its check of the value")
    for name in args.models.split(","):
        bench(name, args.rounds, args.batch, lens)


if __name__ == "__main__":
    main()
