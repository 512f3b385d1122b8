"""Wall time of `hookdump list-modules MODEL` next to importing torch and timm, side by side in one run.

    .venv/bin/pip install -e '.[bench]'          # torchinfo, for the comparison
    .venv/bin/python scripts/bench_list_modules.py [--model twins_svt_large] [--rounds 7]

Each round runs every command once, in turn (interleaved, so a busy machine slows all of them alike), as a
fresh process with stdout to a pipe that is read and dropped. Prints the median wall time, the ratio to the
`import torch, timm` baseline, and each command's peak resident memory (ru_maxrss from os.wait4).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


def commands(model: str) -> dict[str, list[str]]:
    python = sys.executable
    hookdump = shutil.which("hookdump", path=str(Path(python).parent)) or "hookdump"
    found = {
        "import torch, timm (baseline)": [python, "-c", "import torch, timm"],
        f"hookdump list-modules {model}": [hookdump, "list-modules", model],
        "timm.create_model + print(named_modules())": [python, "-c", HAND_WRITTEN.format(model=model)],
    }
    try:
        import torchinfo  # noqa: F401

        found["torchinfo.summary"] = [python, "-c", TORCHINFO.format(model=model)]
    except ImportError:
        print("torchinfo is not installed (pip install -e '.[bench]'): its column is left out")
    return found


def run_with_rss(argv: list[str]) -> tuple[float, int]:
    """Like ``run`` but reaps the child itself, so its own peak memory can be read."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed with exit code {proc.returncode}")
    return seconds, usage.ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="twins_svt_large")
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cmds = commands(opts.model)
    for argv in cmds.values():  # warm the file cache once; not counted
        run_with_rss(argv)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    rss: dict[str, int] = dict.fromkeys(cmds, 0)
    for i in range(opts.rounds):
        for name, argv in cmds.items():
            seconds, peak = run_with_rss(argv)
            times[name].append(seconds)
            rss[name] = max(rss[name], peak)
        line = "  ".join(f"{t[-1]:.2f}s" for t in times.values())
        print(f"round {i + 1}/{opts.rounds}: {line}", flush=True)
    base = statistics.median(next(iter(times.values())))
    print(f"\n{opts.rounds} interleaved rounds, {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    width = max(len(n) for n in cmds)
    print(f"{'command':<{width}}  {'median':>8}  {'ratio':>6}  {'peak RSS':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<{width}}  {median:7.2f}s  {median / base:5.2f}x  {rss[name] / 1024:7.0f}MB")


if __name__ == "__main__":
    main()
