"""Capture cost side by side, in one process: hookdump's early stop against a full forward and its peers.

Captures ``pos_block.0.proj.0`` (an early layer) of ``twins_svt_large`` on a batch of images and times,
interleaved round by round (medians, this machine is shared and noisy):

* ``full forward``: the plain model, no hooks (the baseline);
* ``hand hook``: a hand-written forward hook that clones, with a full forward (what people write);
* ``timm stop_early``: timm's own ``forward_intermediates(indices=[0], stop_early=True)`` (stage 0 output);
* ``hookdump early stop``: hookdump's recorder as ``capture`` runs it (stops after the wanted layer);
* ``hookdump full``: the same with ``--no-early-stop``.

Then the whole command, end to end, with and without ``--no-early-stop`` (fresh processes, ``--cli-runs``
rounds). ``--quick``: twins_svt_small, batch 1, one run of the command.

    .venv/bin/python scripts/bench/capture.py [--rounds 7] [--batch 8] [--cli-runs 3] [--model M]
"""

from __future__ import annotations

import harness

LAYER = "pos_block.0.proj.0"


def main() -> None:
    options = harness.parser(__doc__, rounds=7)
    options.add_argument("--batch", type=int, default=8)
    options.add_argument("--cli-runs", type=int, default=3)
    options.add_argument("--model", default="twins_svt_large")
    args = harness.parse(options, quick={"batch": 1, "cli_runs": 1, "model": "twins_svt_small"})
    import timm
    import torch

    from hookdump.capture.recorder import Recorder
    from hookdump.model import inventory, layers
    from hookdump.model.sources.timm import create as models

    torch.manual_seed(0)
    model = timm.create_model(args.model).eval()
    x = torch.randn(args.batch, 3, 224, 224)
    found = inventory.take(lambda: models.build(args.model, meta=True), lambda: model, (3, 224, 224))
    targets = layers.resolve([LAYER], found, args.model)
    calls = {m.name: m.calls or 1 for m in found.modules}
    module = dict(model.named_modules())[LAYER]

    def hand() -> None:
        kept = []
        handle = module.register_forward_hook(lambda m, a, o: kept.append(o.detach().clone()))
        try:
            model(x)
        finally:
            handle.remove()

    def recorder(early: bool) -> None:
        with Recorder(model, targets, expected_calls=calls if early else None) as rec:
            rec.run(x, args.model)

    cases = {
        "full forward": lambda: model(x),
        "hand hook": hand,
        "timm stop_early": lambda: model.forward_intermediates(
            x, indices=[0], intermediates_only=True, stop_early=True
        ),
        "hookdump early stop": lambda: recorder(True),
        "hookdump full": lambda: recorder(False),
    }
    with torch.no_grad():
        results = harness.timings(cases, args.rounds)
    threads = torch.get_num_threads()
    title = f"{args.model}, capture {LAYER}, batch {args.batch}x3x224x224, torch threads {threads}"
    harness.table(title, results, "full forward", digits=3)
    end_to_end(args.model, args.cli_runs)


def end_to_end(model: str, runs: int) -> None:
    """``hookdump capture`` of the bundled photo, with and without ``--no-early-stop``, fresh processes."""
    sample = harness.ROOT / "hookdump" / "data"
    with harness.workdir("hookdump-bench-capture-") as work:
        out = work / "out"
        cmd = [harness.HOOKDUMP, "capture", "-m", model, "-l", LAYER, sample, "-o", out, "--overwrite", "-q"]
        cases = {
            "early stop": lambda: harness.process(cmd),
            "--no-early-stop": lambda: harness.process([*cmd, "--no-early-stop"]),
        }
        results = harness.rounds(cases, runs)
    harness.table("end to end (hookdump capture, one photo)", results, "--no-early-stop")


if __name__ == "__main__":
    main()
