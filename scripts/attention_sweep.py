"""Which timm architectures' attention weights ``--attention`` can capture: a sweep on the meta device.

    .venv/bin/python scripts/attention_sweep.py                   # one model per timm model module file
    .venv/bin/python scripts/attention_sweep.py --all --jobs 2 --timeout 120   # every timm model
    .venv/bin/python scripts/attention_sweep.py --filter 'vit_*' --all --json attention.json

For each model: build it on meta (no weights), find the modules that carry timm's ``fused_attn`` switch,
turn the switch off with ``hookdump.model.attention.unfuse`` and trace one forward on meta at the model's
default input size, then sort the architecture into one of three classes:

  a  no module has a ``fused_attn`` attribute (no timm attention module to unfuse)
  b  every ``fused_attn`` module has an ``attn_drop`` child (or an ``nn.Softmax`` one of 4-D output) that
     fires after unfusing: --attention captures the softmax weights of all of them
  c  some ``fused_attn`` module has no ``attn_drop`` child, or its ``attn_drop`` does not fire after
     unfusing: that attention class has no unfused path hookdump can capture (the classes are named)

The default selection is the first model (timm's sorted order) of each model module file
(``timm.models._registry._model_to_module``); ``--filter`` narrows the names first, ``--all`` keeps every
model. A model that fails to build or trace on meta is an error with its reason. Each model runs in a
worker process under a per-model timeout (SIGALRM).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import signal
import sys
import time
from typing import Any

NO_CHILD = "no attn_drop child"
NOT_CALLED = "attn_drop not called after unfusing"
MODULE_IDLE = "the attention module itself is never called"


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("timed out")


def select(pattern: str, every: bool, limit: int) -> list[tuple[str, str]]:
    """``(model, module file)`` pairs: the first model of each module file, or every model with ``every``."""
    import timm
    from timm.models import _registry

    names = timm.list_models(pattern) if pattern else timm.list_models()
    chosen: dict[str, str] = {}  # model -> module file, in timm's order
    seen: set[str] = set()
    for name in names:
        module = _registry._model_to_module.get(name, "?")
        if every or module not in seen:
            chosen[name] = module
            seen.add(module)
    pairs = list(chosen.items())
    return pairs[:limit] if limit else pairs


def _qualname(kind: type) -> str:
    """``tiny_vit.Attention``: the class with its module, less timm's ``timm.models.`` prefix."""
    return f"{kind.__module__.removeprefix('timm.models.')}.{kind.__qualname__}"


def check(args: tuple[str, str, int]) -> dict[str, Any]:
    """One architecture: build on meta, unfuse, trace on meta, classify. Never raises."""
    name, module_file, timeout = args
    from hookdump.inputs import transforms as inputs
    from hookdump.model import attention, inventory, tree
    from hookdump.model.sources.timm import create as models

    started = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    stage = "build"
    result: dict[str, Any] = {"name": name, "module": module_file}
    try:
        model = models.build(name, meta=True)
        switches = {path: mod for path, mod in model.named_modules() if hasattr(mod, "fused_attn")}
        result["fused_attn_modules"] = len(switches)
        was_on = {path for path, mod in switches.items() if getattr(mod, "fused_attn", None) is True}
        result["fused_on"] = attention.unfuse(model)
        stage = "trace"
        size = tuple(inputs.data_config(model, None)["input_size"])
        found = inventory.trace(model, size, "meta")
        per_class: dict[str, dict[str, Any]] = {}
        for path, mod in switches.items():
            entry = per_class.setdefault(
                _qualname(type(mod)),
                {
                    "class": type(mod).__name__,
                    "modules": 0,
                    "fused_on": 0,
                    "capturable": 0,
                    "problems": {},
                    "example": path,
                },
            )
            entry["modules"] += 1
            entry["fused_on"] += path in was_on
            drop_path = f"{path}.{tree.ATTN_DROP}" if path else tree.ATTN_DROP
            own = found.get(path) if path else None
            drop = found.get(drop_path)
            softmax = attention.weights_child(path, found) if path and drop is None else None
            if softmax is not None:  # no attn_drop, an nn.Softmax child that outputs the weights (DaViT)
                problem: str | None = None
                entry.setdefault("shape", found.get(softmax).output_shapes[0])  # type: ignore[union-attr]
            elif mod._modules.get(tree.ATTN_DROP) is None or drop is None:
                problem = NO_CHILD
            elif drop.fires:
                problem = None
                entry.setdefault("shape", drop.output_shapes[0] if drop.output_shapes else None)
            elif own is not None and not own.fires:
                problem = MODULE_IDLE
            else:
                problem = NOT_CALLED
            if problem is None:
                entry["capturable"] += 1
            else:
                entry["problems"][problem] = entry["problems"].get(problem, 0) + 1
        result["attention"] = per_class
        # attn_drop children of modules without the switch (attention that always runs unfused)
        others: dict[str, dict[str, Any]] = {}
        for path, mod in model.named_modules():
            if path in switches or mod._modules.get(tree.ATTN_DROP) is None:
                continue
            drop = found.get(f"{path}.{tree.ATTN_DROP}" if path else tree.ATTN_DROP)
            entry = others.setdefault(type(mod).__name__, {"modules": 0, "fires": 0, "example": path})
            entry["modules"] += 1
            if drop is not None and drop.fires:
                entry["fires"] += 1
                entry.setdefault("shape", drop.output_shapes[0] if drop.output_shapes else None)
        result["unswitched_attn_drop"] = others
        if not switches:
            result["class"] = "a"
        elif all(entry["capturable"] == entry["modules"] for entry in per_class.values()):
            result["class"] = "b"
        else:
            result["class"] = "c"
        result["ok"] = True
    except BaseException as exc:  # every failure is a data point here
        text = str(exc).strip().splitlines()
        result.update(ok=False, stage=stage, reason=f"{type(exc).__name__}: {text[0][:200] if text else ''}")
    finally:
        signal.alarm(0)
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def _class_cell(entry: dict[str, Any]) -> str:
    """``Attention (no attn_drop child: 12/12)`` for a class with problems, ``Attention (12)`` otherwise."""
    off = entry["modules"] - entry["fused_on"]
    already = f", fused_attn already off: {off}" if off else ""
    if not entry["problems"]:
        return f"{entry['class']} ({entry['modules']}{already})"
    why = "; ".join(f"{p}: {n}/{entry['modules']}" for p, n in entry["problems"].items())
    return f"{entry['class']} ({why}{already})"


def report(results: list[dict[str, Any]], every: bool) -> None:
    done = sorted((r for r in results if r["ok"]), key=lambda r: (r["module"], r["name"]))
    width = max([len(r["name"]) for r in results] + [12])
    mwidth = max([len(r["module"]) for r in results] + [11])
    group = {
        "a": "(a) no fused_attn module",
        "b": "(b) every fused_attn module has an attn_drop that fires after unfusing: --attention captures",
        "c": "(c) some fused_attn modules have no capturable unfused path (those classes named)",
    }
    for kind in ("b", "c"):
        rows = [r for r in done if r["class"] == kind]
        print(f"\n{group[kind]}: {len(rows)}")
        if not rows:
            continue
        print(f"  {'module file':{mwidth}}  {'architecture':{width}}  attention module classes")
        for r in rows:
            bad = [c for c, e in r["attention"].items() if e["problems"]]
            good = [c for c, e in r["attention"].items() if not e["problems"]]
            cells = [_class_cell(r["attention"][c]) for c in bad]
            if good and bad:
                cells.append("capturable: " + ", ".join(_class_cell(r["attention"][c]) for c in good))
            elif good:
                cells = [_class_cell(r["attention"][c]) for c in good]
            print(f"  {r['module']:{mwidth}}  {r['name']:{width}}  {'; '.join(cells)}")
    plain = [r for r in done if r["class"] == "a"]
    print(f"\n{group['a']}: {len(plain)}")
    unfused = [r for r in plain if any(e["fires"] for e in r["unswitched_attn_drop"].values())]
    if unfused:
        print(
            f"  of which {len(unfused)} have an attn_drop that fires anyway (attention without the switch,"
            " always unfused):"
        )
        for r in unfused:
            cells = [
                f"{c} ({e['fires']}/{e['modules']} fire, {e.get('shape')})"
                for c, e in r["unswitched_attn_drop"].items()
            ]
            print(f"  {r['module']:{mwidth}}  {r['name']:{width}}  {'; '.join(cells)}")
    rest = [r for r in plain if r not in unfused]
    label = (lambda r: r["name"]) if every else (lambda r: f"{r['module']} ({r['name']})")
    print(f"  the other {len(rest)}:")
    line = "  "
    for text in (label(r) + "," for r in rest):
        if len(line) + len(text) > 108:
            print(line.rstrip())
            line = "  "
        line += text + " "
    if line.strip():
        print(line.rstrip().rstrip(","))
    errors = sorted((r for r in results if not r["ok"]), key=lambda r: r["name"])
    print(f"\nerrors: {len(errors)}")
    for r in errors:
        print(f"  {r['module']:{mwidth}}  {r['name']:{width}}  ({r['stage']}) {r['reason']}")
    counts = collections.Counter(r["class"] for r in done)
    print(
        f"\ntotals: (a) {counts['a']}  (b) {counts['b']}  (c) {counts['c']}  errors {len(errors)}"
        f"  of {len(results)}"
    )
    bad_classes: collections.Counter[str] = collections.Counter()
    for r in done:
        for qualname, entry in r["attention"].items():
            if entry["problems"]:
                bad_classes[qualname] += 1
    if bad_classes:
        print(
            "attention classes without a capturable path (architectures): "
            + ", ".join(f"{c} ({n})" for c, n in sorted(bad_classes.items()))
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--filter", default="", help="timm.list_models() glob, e.g. 'vit_*'")
    parser.add_argument("--all", dest="every", action="store_true", help="every model, not one per file")
    parser.add_argument("--limit", type=int, default=0, help="only the first N selected names (0: all)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per model")
    parser.add_argument("--json", dest="json_out", help="write every per-model result to this file")
    opts = parser.parse_args()

    import timm

    pairs = select(opts.filter, opts.every, opts.limit)
    what = "models" if opts.every else "models (one per timm model module file)"
    print(f"sweeping {len(pairs)} {what}, timm {timm.__version__}, {opts.jobs} jobs", flush=True)
    started = time.perf_counter()
    results = []
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(opts.jobs, maxtasksperchild=50) as pool:
        work = [(name, module, opts.timeout) for name, module in pairs]
        for i, result in enumerate(pool.imap_unordered(check, work, chunksize=1), 1):
            results.append(result)
            if not result["ok"]:
                print(f"ERROR {result['name']} ({result['stage']}): {result['reason']}", flush=True)
            if i % 25 == 0:
                print(f"... {i}/{len(pairs)} done", flush=True)
    report(results, opts.every)
    slow = sorted(results, key=lambda r: -r["seconds"])[:5]
    print("slowest: " + ", ".join(f"{r['name']} {r['seconds']:.1f}s" for r in slow))
    print(f"run time: {time.perf_counter() - started:.0f}s")
    if opts.json_out:
        with open(opts.json_out, "w") as f:
            json.dump(sorted(results, key=lambda r: r["name"]), f, indent=1)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
