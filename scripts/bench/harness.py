"""The benchmarks' one harness: cases timed in interleaved rounds, fresh processes measured, one table.

Every benchmark in this folder says only what it compares (its cases, its inputs, its baseline); the
plumbing is here. A case is a callable that returns a ``Run``: ``process`` runs a command as a fresh
process (wall time; user and system CPU time, minor page faults and peak RSS from ``os.wait4``, its
children's included: the peak is the largest process's, as ``/usr/bin/time -v`` reports it), ``timed``
times a call in this process. ``rounds`` runs every case once a round, in turn, so that a busy machine
slows all of them alike; ``table`` prints medians, the spread (min, max), the ratio to a named baseline
case, CPU time and peak RSS in one format, with the columns a benchmark adds, or a line of JSON each with
``--json`` (everything else then goes to stderr). ``parser`` and ``parse`` give every benchmark
``--rounds N``, ``--quick`` (its small configuration, for a smoke check) and ``--json``.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOOKDUMP = str(Path(sys.executable).with_name("hookdump"))  # the console script beside this interpreter
OPTIONS = {"json": False}


@dataclass
class Run:
    """One timing of one case (nan where it failed or was not measured); ``figures``: what it reports."""

    wall: float
    user: float = math.nan
    system: float = math.nan
    rss: float = math.nan  # MB
    faults: float = math.nan  # minor page faults
    figures: dict[str, float] = field(default_factory=dict)
    stdout: str = ""

    def value(self, key: str) -> float:
        """A field (``cpu``: user + system) or a figure by its name."""
        if key == "cpu":
            return self.user + self.system
        if key in ("wall", "user", "system", "rss", "faults"):
            return float(getattr(self, key))
        return self.figures.get(key, math.nan)


Results = dict[str, list[Run]]


def process(argv: Sequence[object], env: Mapping[str, str | None] | None = None, *, ok: Sequence[int] = (0,),
            check: bool = False, profile: bool = False, out: Path | None = None) -> Run:  # fmt: skip
    """``argv`` as a fresh process, its stdout kept; ``env``: variables set over this process's own (None:
    unset). A failure (an exit status not in ``ok``) is a nan run and a FAILED line, or with ``check`` the
    end of the benchmark. ``profile``: hookdump's breakdown (``HOOKDUMP_PROFILE``) becomes its figures.
    ``out``: a folder the command writes, removed before the run and after it."""
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    cmd = [str(a) for a in argv]
    environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    folder = Path(tempfile.mkdtemp(prefix="hookdump-bench-"))
    if profile:
        environ["HOOKDUMP_PROFILE"] = str(folder / "profile.json")
    try:
        with (folder / "stderr").open("w+b") as err:
            start = time.perf_counter()
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=environ)
            assert child.stdout is not None
            out = child.stdout.read()
            _, status, usage = os.wait4(child.pid, 0)  # reaped here, so its resource usage can be read
            wall = time.perf_counter() - start
            child.stdout.close()
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode not in ok:
                err.seek(0)
                tail = err.read().decode(errors="replace").strip()[-3000:]
                shown = " ".join(a if len(a) < 100 else f"{a[:40].strip()}..." for a in cmd)
                message = f"\nFAILED ({child.returncode}): {shown}\n{tail}"
                if check:
                    raise SystemExit(message)
                print(message, file=sys.stderr)
                return Run(math.nan)
        spans = folder / "profile.json"
        figures = json.loads(spans.read_text()) if profile and spans.exists() else {}
        rss = usage.ru_maxrss / 1024
        return Run(wall, usage.ru_utime, usage.ru_stime, rss, usage.ru_minflt, figures, out.decode())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)


def chain(runs: Sequence[Run]) -> Run:
    """Several runs as one case: their times and faults added, the largest peak RSS."""
    return Run(sum(r.wall for r in runs), sum(r.user for r in runs), sum(r.system for r in runs),
               max(r.rss for r in runs), sum(r.faults for r in runs))  # fmt: skip


def timed(call: Callable[[], object]) -> Run:
    """One call in this process: its wall time, and the CPU time and faults of this process (every thread)
    and of the child processes it reaped meanwhile (a decoding worker's)."""
    who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    before, start = [resource.getrusage(w) for w in who], time.perf_counter()
    call()
    wall = time.perf_counter() - start
    after = [resource.getrusage(w) for w in who]

    def spent(key: str) -> float:
        return sum(getattr(a, key) - getattr(b, key) for a, b in zip(after, before, strict=True))

    return Run(wall, spent("ru_utime"), spent("ru_stime"), faults=spent("ru_minflt"))


def rounds(cases: Mapping[str, Callable[[], Run]], count: int, *, warm: bool = False,
           alternate: bool = False) -> Results:  # fmt: skip
    """Every case once a round, in turn, ``count`` rounds; ``warm``: one uncounted run of each first;
    ``alternate``: every other round in the reverse order (paired rounds). A line a round on stderr."""
    if warm:
        for case in cases.values():
            case()
    results: Results = {name: [] for name in cases}
    for r in range(count):
        print(f"  round {r + 1}/{count}:", end="", file=sys.stderr, flush=True)
        for name, case in list(cases.items())[:: -1 if alternate and r % 2 else 1]:
            results[name].append(case())
            print(f" {name} {results[name][-1].wall:.2f}s,", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    return results


def timings(calls: Mapping[str, Callable[[], object]], count: int, *, warm: bool = True) -> Results:
    """``rounds`` of calls timed in this process (``timed``), warmed up first by default."""
    return rounds({name: lambda call=call: timed(call) for name, call in calls.items()}, count, warm=warm)


def stat(runs: Sequence[Run], key: str, how: Callable[[list[float]], float] = statistics.median) -> float:
    """``how`` (median by default) of ``key`` over the runs that did not fail (nan if none)."""
    values = [v for r in runs if not math.isnan(v := r.value(key))]
    return how(values) if values else math.nan


def ratio(results: Results, a: str, b: str, key: str = "wall", how: Any = statistics.median) -> float:
    """``a``'s median (or ``how``) of ``key`` over ``b``'s."""
    return stat(results[a], key, how) / stat(results[b], key, how)


def goal(results: Results, a: str, b: str, op: str, limit: float) -> str:
    """The note of a goal on median wall time, ``a / b`` ``op`` (``<=``, ``>=``) ``limit``, judged."""
    found = ratio(results, a, b)
    met = found <= limit if op == "<=" else found >= limit
    verdict = "not measured (a run failed)" if math.isnan(found) else "met" if met else "MISSED"
    also = f"(min {ratio(results, a, b, how=min):.2f}, cpu {ratio(results, a, b, 'cpu'):.2f})"
    return f"goal: {a} / {b} {op} {limit:g}: {found:.2f} {verdict} {also}"


@dataclass(frozen=True)
class Column:
    """A column: ``how`` (median, min, max) over the rounds of ``key`` (a ``Run`` field, ``cpu`` or a figure),
    divided by ``per``; ``ratio``: over the baseline's; ``digits``: None, 2 for a ratio, else the table's."""

    title: str
    key: str
    how: Callable[[list[float]], float] = statistics.median
    ratio: bool = False
    digits: int | None = None
    per: float = 1.0

    def places(self, digits: int) -> int:
        """Its decimal places in a table of ``digits`` for seconds."""
        return self.digits if self.digits is not None else 2 if self.ratio else digits

    def value(self, runs: Sequence[Run], base: Sequence[Run]) -> float:
        found = stat(runs, self.key, self.how) / self.per
        return found / (stat(base, self.key, self.how) / self.per) if self.ratio else found


CORE = (
    Column("median s", "wall"),
    Column("x", "wall", ratio=True),
    Column("min s", "wall", min),
    Column("max s", "wall", max),
    Column("cpu s", "cpu"),
    Column("peak RSS MB", "rss", digits=0),
)


def say(text: str = "") -> None:
    """A line of the benchmark's output: on stdout, or on stderr with ``--json`` (stdout is the tables')."""
    print(text, file=sys.stderr if OPTIONS["json"] else sys.stdout, flush=True)


def table(title: str, results: Results, baseline: str, columns: Sequence[Column] = (),
          notes: Sequence[str] = (), digits: int = 2) -> None:  # fmt: skip
    """One table: a row a case (``CORE`` and then ``columns``), ``x`` against ``baseline``, then ``notes``."""
    shown = [*CORE, *columns]
    rows = {name: [c.value(runs, results[baseline]) for c in shown] for name, runs in results.items()}
    if OPTIONS["json"]:
        print(json.dumps(_as_json(title, results, baseline, shown, rows, notes)), flush=True)
        return
    width = max(len(name) for name in [*results, "case"]) + 2
    widths = [max(len(c.title), 6) + 2 for c in shown]
    print(f"{title}; x: against {baseline}, rounds {max(len(r) for r in results.values())}")
    print(f"{'case':<{width}}" + "".join(f"{c.title:>{w}}" for c, w in zip(shown, widths, strict=True)))
    for name, values in rows.items():
        cells = (f"{'-' if math.isnan(v) else f'{v:.{c.places(digits)}f}':>{w}}"
                 for c, v, w in zip(shown, values, widths, strict=True))  # fmt: skip
        print(f"{name:<{width}}" + "".join(cells))
    for note in notes:
        print(note)
    print(flush=True)


def _clean(value: Any) -> Any:
    """nan as JSON's null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _as_json(title: str, results: Results, baseline: str, shown: Sequence[Column],
             rows: dict[str, list[float]], notes: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """The table as JSON: its title, baseline, columns and rows, every run's measures, its notes."""
    runs = {
        name: [{k: _clean(v) for k, v in {**asdict(r), **r.figures}.items() if k not in ("stdout", "figures")}
               for r in found]
        for name, found in results.items()
    }  # fmt: skip
    return {
        "title": title,
        "baseline": baseline,
        "columns": ["case", *(c.title for c in shown)],
        "rows": [[name, *map(_clean, values)] for name, values in rows.items()],
        "runs": runs,
        "notes": list(notes),
    }


def have(module: str, what: str) -> bool:
    """Whether ``module`` is installed; if not, a line saying that ``what`` is left out."""
    if importlib.util.find_spec(module) is not None:
        return True
    say(f"skipped: {what} ({module} is not installed: pip install -e '.[bench]')")
    return False


def me(script: str, kind: str, *args: object) -> list[str]:
    """The command that runs ``script``'s worker ``kind`` (``--worker KIND ARGS``) as a fresh process."""
    return [sys.executable, str(Path(script).resolve()), "--worker", kind, *map(str, args)]


def worker() -> tuple[str, list[str]] | None:
    """``(kind, args)`` when this process is a benchmark's worker (``me``), else None."""
    return (sys.argv[2], sys.argv[3:]) if len(sys.argv) > 2 and sys.argv[1] == "--worker" else None


@contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    """A temporary folder for a benchmark's files, removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The benchmark's options, starting with the common ones; ``doc``: its docstring (``--help``)."""
    found = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds; medians are printed")
    found.add_argument("--quick", action="store_true", help="a small configuration, for a smoke check")
    found.add_argument("--json", action="store_true", help="each table as a line of JSON on stdout")
    return found


def bytecode(checkout: Path) -> None:
    """``checkout``'s hookdump compiled to bytecode now, as ``pip install`` does, so that no fresh process
    compiles it again: under ``PYTHONDONTWRITEBYTECODE`` (set on some machines, this one included) an
    editable install is recompiled by every process, about 0.2 s that torch and timm, compiled when they
    were installed, do not pay. Quiet, and a no-op where the bytecode is up to date."""
    compileall.compile_dir(checkout / "hookdump", quiet=1)


def parse(options: argparse.ArgumentParser, quick: Mapping[str, Any]) -> argparse.Namespace:
    """The arguments; with ``--quick``, ``quick``'s values are the defaults (what is given still wins).
    hookdump is compiled to bytecode first (``bytecode``)."""
    args = options.parse_args()
    if args.quick:
        options.set_defaults(**quick)
        args = options.parse_args()
    OPTIONS["json"] = args.json
    bytecode(ROOT)
    return args
