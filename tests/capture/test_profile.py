"""``HOOKDUMP_PROFILE``: where a capture's time went, written as JSON when the run ends (issue 22's
breakdown, which scripts/bench/dataset.py prints); nothing is written without it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hookdump import api
from hookdump.errors import UsageError
from hookdump.inputs import forks
from hookdump.inputs.spec import InputSpec
from hookdump.store.folder import profile


def test_the_profile_names_every_span_and_they_fit_in_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = InputSpec(sample=True)
    api.capture(sample, ["layer1"], model="test_resnet", out=tmp_path / "plain")
    assert not list(tmp_path.glob("*.json"))
    target = tmp_path / "profile.json"
    monkeypatch.setenv(profile.ENV, str(target))
    api.capture(sample, ["layer1", "layer3"], model="test_resnet", out=tmp_path / "out")
    spans = json.loads(target.read_text())
    main = ("setup", "decode", "forward", "hooks", "writer wait", "between batches", "writer drain", "commit")
    writer = ("stats", "write", "checkpoint")
    assert set(main + writer + ("copy", "reduce", "run")) <= set(spans), sorted(spans)
    assert all(spans[k] >= 0 for k in main + writer + ("copy", "run"))
    assert spans["copy"] + spans["reduce"] <= spans["hooks"]
    assert sum(spans[k] for k in main) <= spans["run"] * 1.001
    assert 0 < spans["records cpu"] <= spans["records"] * 1.001 + 0.001  # the records' CPU: within their wall
    if sys.platform == "linux":  # the process's life before the run: pytest's, here
        assert spans["before run"] > 0


def test_a_span_counts_its_wall_time_and_its_threads_cpu_time_apart() -> None:
    """A wait (sleeping here; an fsync in a capture) is wall time and no CPU time; spans of a name add up."""
    profile.reset()
    for _ in range(2):
        with profile.span("nap"):
            time.sleep(0.05)
    with profile.span("work"):
        sum(i * i for i in range(300_000))
    spans = dict(profile.seconds)
    profile.reset()
    assert spans["nap"] >= 0.1 and spans["nap cpu"] < spans["nap"] / 2
    assert 0 < spans["work cpu"] <= spans["work"] + 0.001


@pytest.mark.skipif(sys.platform != "linux", reason="checks are spread over forked processes on Linux alone")
def test_a_span_over_forked_checks_counts_the_childrens_cpu_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--resume``'s check hashes in forked processes: its span's CPU time is theirs and the parent's."""
    monkeypatch.setattr(forks, "processes", lambda inputs: 3)

    def burn(item: int) -> None:
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass

    profile.reset()
    for name, counted in (("parent", False), ("all", True)):
        with profile.span(name, forks=counted):
            forks.failures(range(30), burn, first_only=False)  # 0.2 s of CPU in each of the three
    spans = dict(profile.seconds)
    profile.reset()
    assert 0.15 < spans["parent cpu"] < 0.3 and spans["all cpu"] > 0.55, spans


def test_a_users_file_where_the_profile_goes_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "mine.json"
    target.write_text("the user's\n")
    monkeypatch.setenv(profile.ENV, str(target))
    with pytest.raises(UsageError, match=r"mine\.json` is in the way: hookdump capture would write a file"):
        api.capture(InputSpec(sample=True), ["layer1"], model="test_resnet", out=tmp_path / "out")
    assert target.read_text() == "the user's\n" and not (tmp_path / "out").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
def test_process_age_counts_from_the_process_start() -> None:
    code = "import time; time.sleep(1.5)\nfrom hookdump.store.folder.profile import process_age\n"
    code += "print(process_age())"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    age = float(done.stdout)
    assert 1.5 <= age <= time.perf_counter() - started + 0.02  # a clock tick of rounding at most
