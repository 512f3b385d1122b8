"""Wall time of `hookdump list-modules MODEL` next to importing torch and timm, side by side in one run.

    .venv/bin/pip install -e '.[bench]'          # torchinfo, for the comparison
    .venv/bin/python scripts/bench/list_modules.py [--model twins_svt_large] [--rounds 7]

Each round runs every command once, in turn (interleaved, so a busy machine slows all of them alike), as a
fresh process with stdout to a pipe that is read and dropped, after one uncounted run of each (the file
cache warmed). Prints the median wall time, the ratio to the `import torch, timm` baseline, and each
command's peak resident memory. ``--quick``: resnet18, one round.
"""

from __future__ import annotations

import os
import sys

import harness

HAND_WRITTEN = (
    "import timm\n"
    "model = timm.create_model({model!r})\n"
    "print('\\n'.join(f'{{n}}  {{type(m).__name__}}' for n, m in model.named_modules()))\n"
)
TORCHINFO = (
    "import timm, torchinfo\n"
    "model = timm.create_model({model!r})\n"
    "torchinfo.summary(model, input_size=(1, *model.pretrained_cfg['input_size']), device='cpu', depth=99)\n"
)
BASELINE = "import torch, timm (baseline)"


def main() -> None:
    options = harness.parser(__doc__, rounds=7)
    options.add_argument("--model", default="twins_svt_large")
    args = harness.parse(options, quick={"model": "resnet18", "rounds": 1})
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    python, model = sys.executable, args.model
    commands = {
        BASELINE: [python, "-c", "import torch, timm"],
        f"hookdump list-modules {model}": [harness.HOOKDUMP, "list-modules", model],
        "timm.create_model + print(named_modules())": [python, "-c", HAND_WRITTEN.format(model=model)],
    }
    if harness.have("torchinfo", "the torchinfo.summary row"):
        commands["torchinfo.summary"] = [python, "-c", TORCHINFO.format(model=model)]
    cases = {name: lambda cmd=cmd: harness.process(cmd) for name, cmd in commands.items()}
    results = harness.rounds(cases, args.rounds, warm=True)
    title = f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}"
    harness.table(title, results, BASELINE)


if __name__ == "__main__":
    main()
