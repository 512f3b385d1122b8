"""scripts/bench/harness.py, the benchmarks' one harness: medians, spread and ratios of made-up runs, the
table as text and as JSON, a fresh process measured, rounds interleaved, --quick; every benchmark's
options parse (``--help``)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench"
_spec = importlib.util.spec_from_file_location("harness", BENCH / "harness.py")
assert _spec is not None and _spec.loader is not None
harness = importlib.util.module_from_spec(_spec)
sys.modules["harness"] = harness  # (its dataclasses look their module up), the name the benchmarks import
_spec.loader.exec_module(harness)


def made_up() -> dict[str, list]:
    run = harness.Run
    return {
        "base": [run(2.0, 1.0, 0.5, 100.0), run(4.0, 2.0, 0.5, 120.0), run(3.0, 1.5, 0.5, 110.0)],
        "fast": [run(1.0, 0.5, 0.25, 50.0, figures={"own": 0.8}), run(math.nan), run(2.0, 0.5, 0.25, 70.0)],
    }


def test_medians_spread_and_ratios_skip_the_failed_runs() -> None:
    results = made_up()
    assert harness.stat(results["base"], "wall") == 3.0
    assert harness.stat(results["fast"], "wall") == 1.5  # the nan run left out
    assert harness.stat(results["fast"], "wall", min) == 1.0
    assert harness.stat(results["base"], "cpu") == 2.0  # user + system
    assert harness.ratio(results, "fast", "base") == 0.5
    assert harness.ratio(results, "fast", "base", "rss") == 60.0 / 110.0
    assert harness.stat(results["base"], "own") != harness.stat(results["base"], "own")  # nan: no figure
    said = harness.goal(results, "fast", "base", "<=", 0.6)
    assert said == "goal: fast / base <= 0.6: 0.50 met (min 0.50, cpu 0.38)"
    assert "MISSED" in harness.goal(results, "fast", "base", ">=", 1.0)


def test_the_table_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    columns = [harness.Column("own s", "own", digits=1), harness.Column("x RSS", "rss", ratio=True)]
    harness.table("made up", made_up(), "base", columns, notes=["a note"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "made up; x: against base, rounds 3"
    assert lines[1].split() == ["case", "median", "s", "x", "min", "s", "max", "s", "cpu", "s", "peak", "RSS",
                                "MB", "own", "s", "x", "RSS"]  # fmt: skip
    assert lines[2].split() == ["base", "3.00", "1.00", "2.00", "4.00", "2.00", "110", "-", "1.00"]
    assert lines[3].split() == ["fast", "1.50", "0.50", "1.00", "2.00", "0.75", "60", "0.8", "0.55"]
    assert lines[4:] == ["a note", ""]


def test_the_table_as_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(harness.OPTIONS, "json", True)
    harness.say("to stderr")
    harness.table("made up", made_up(), "base", [harness.Column("own s", "own")], notes=["a note"])
    out, err = capsys.readouterr()
    assert err == "to stderr\n"
    found = json.loads(out)
    assert found["columns"] == ["case", "median s", "x", "min s", "max s", "cpu s", "peak RSS MB", "own s"]
    assert found["rows"][0] == ["base", 3.0, 1.0, 2.0, 4.0, 2.0, 110.0, None]
    assert found["rows"][1][:3] == ["fast", 1.5, 0.5]
    assert found["runs"]["fast"][0] == {"wall": 1.0, "user": 0.5, "system": 0.25, "rss": 50.0, "faults": None,
                                        "own": 0.8}  # fmt: skip
    assert found["runs"]["fast"][1]["wall"] is None
    assert (found["baseline"], found["notes"]) == ("base", ["a note"])


def test_a_fresh_process_is_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = "import os; b = bytearray(64 * 2**20); print(os.environ['HARNESS_TEST'], 'HOME' in os.environ)"
    run = harness.process([sys.executable, "-c", code], {"HARNESS_TEST": "set", "HOME": None})
    assert run.stdout == "set False\n"
    assert run.rss >= 64 and run.wall > 0 and run.user + run.system > 0 and run.faults > 0
    out = tmp_path / "out"
    out.mkdir()
    failed = harness.process([sys.executable, "-c", "import sys; sys.exit('no')"], out=out)
    assert math.isnan(failed.wall) and not out.exists()
    assert "FAILED (1)" in capsys.readouterr().err
    assert not math.isnan(harness.process([sys.executable, "-c", "raise SystemExit(1)"], ok=(0, 1)).wall)
    with pytest.raises(SystemExit, match="FAILED"):
        harness.process([sys.executable, "-c", "raise SystemExit(3)"], check=True)
    two = harness.chain([run, run])
    assert (two.wall, two.rss) == (2 * run.wall, run.rss)


def test_a_checkout_is_compiled_once_for_every_process(tmp_path: Path) -> None:
    source = tmp_path / "hookdump" / "piece.py"
    source.parent.mkdir()
    source.write_text("VALUE = 7\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}

    def imported() -> tuple[str, str]:  # what the module says, and where -v says its code came from
        done = subprocess.run([sys.executable, "-v", "-c", "import hookdump.piece as p; print(p.VALUE)"],
                              env=env, capture_output=True, text=True, check=True)  # fmt: skip
        origin = [line for line in done.stderr.splitlines() if line.startswith("# code object from")]
        return done.stdout.strip(), [line for line in origin if "piece" in line][-1].strip("'")

    value, origin = imported()
    assert value == "7" and origin.endswith("piece.py") and not (source.parent / "__pycache__").exists()
    harness.bytecode(tmp_path)
    value, origin = imported()
    assert value == "7" and origin.endswith(".pyc")  # read from the bytecode now
    source.write_text("VALUE = 8\n")  # an edit: the stale bytecode is not used
    os.utime(source, (source.stat().st_mtime + 5,) * 2)
    assert imported()[0] == "8"


def test_rounds_take_turns_and_alternate(capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []

    def case(name: str):  # type: ignore[no-untyped-def]
        return lambda: calls.append(name) or harness.Run(1.0)

    results = harness.rounds({"a": case("a"), "b": case("b")}, 3, warm=True, alternate=True)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then every other round reversed
    assert [len(v) for v in results.values()] == [3, 3]
    assert "round 3/3: a 1.00s, b 1.00s," in capsys.readouterr().err
    timed = harness.timings({"sum": lambda: sum(range(1000))}, 2)
    assert len(timed["sum"]) == 2 and timed["sum"][0].wall > 0


def test_quick_gives_defaults_that_given_options_still_win(monkeypatch: pytest.MonkeyPatch) -> None:
    def parsed(*argv: str):  # type: ignore[no-untyped-def]
        options = harness.parser("a benchmark", rounds=5)
        options.add_argument("--images", type=int, default=256)
        monkeypatch.setattr(sys, "argv", ["bench", *argv])
        return harness.parse(options, quick={"images": 8, "rounds": 1})

    assert (parsed().images, parsed().rounds, parsed().json) == (256, 5, False)
    assert (parsed("--quick").images, parsed("--quick").rounds) == (8, 1)
    assert (parsed("--quick", "--rounds", "2").rounds, parsed("--json").json) == (2, True)
    monkeypatch.setitem(harness.OPTIONS, "json", False)


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if p.stem not in ("harness",
                         "photos", "loops")))  # fmt: skip
def test_every_benchmark_has_the_common_options(script: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent.parent)}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert all(option in done.stdout for option in ("--rounds", "--quick", "--json")), done.stdout
