"""Issue 35 items 5-7: one policy for values that are not finite, in every reader of a capture: NaN and
Inf are counted and named, never silently dropped or compared away, and every JSON printed is valid JSON.
Through the real console script, on captures of plugin models that make NaN and Inf
(tests/plugins/nonfinite_plugin.py); the numbers are checked against numpy on the captured files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
from conftest import PLUGINS, SKIMAGE_DATA
from test_cli_messages import paragraph

PLUGIN = ("--import", str(PLUGINS / "nonfinite_plugin.py"), "--input-size", "3,16,16")


def hd(cwd: Path, *args: object) -> subprocess.CompletedProcess[str]:
    done = forkrun.run(args, cwd=cwd)
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
    return done


def strict(text: str) -> object:
    """JSON as the standard has it: no NaN, no Infinity."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def spoiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nonfinite_net over three photos: channel 0 of `spoil` holds +Inf and -Inf, channel 1 NaN, in every
    image; channels 2 and 3 are finite."""
    root = tmp_path_factory.mktemp("nonfinite")
    photos = root / "photos"
    photos.mkdir()
    for name in ("chelsea.png", "coffee.png", "astronaut.png"):
        shutil.copy(SKIMAGE_DATA / name, photos / name)
    done = hd(
        root, "capture", *PLUGIN, "-m", "nonfinite_net", "-l", "spoil", "-l", "conv", photos, "-o", "cap"
    )
    assert done.returncode == 0, done.stderr
    assert "note: spoil (output) holds 9 NaN and 48 Inf of 3,072 values" in done.stderr  # item 7: capture
    return root / "cap"


def test_top_ranks_what_is_finite_and_says_what_it_left_out(spoiled: Path, tmp_path: Path) -> None:
    done = hd(tmp_path, "top", spoiled, "-l", "spoil", "-k", "3", "--sheets", "s", "--json")
    assert done.returncode == 0, done.stderr
    found = strict(done.stdout)
    assert isinstance(found, dict)
    channels = {c["channel"]: c for c in found["channels"]}
    names = [str(Path(spoiled).parent / "photos" / n) for n in ("astronaut.png", "chelsea.png", "coffee.png")]
    for c in (0, 1):  # every input's max is +Inf (channel 0) or NaN (channel 1): none ranked, all named
        assert channels[c]["top"] == [] and channels[c]["png"] is None
        assert sorted(e["input"] for e in channels[c]["excluded"]) == sorted(names)
    assert "3 input(s) left out of the ranking of 2 channel(s) of spoil (0, 1)" in done.stderr
    assert "is NaN or infinite" in done.stderr
    maps = np.load(spoiled / "spoil.npy")
    for c in (2, 3):  # the oracle: numpy's ranking of each input's max over space
        best = np.argsort(-maps[:, c].reshape(3, -1).max(axis=1), kind="stable")
        assert [e["index"] for e in channels[c]["top"]] == best.tolist() and channels[c]["excluded"] == []
        assert (tmp_path / "s" / f"channel-{c}.png").is_file()
    assert not (tmp_path / "s" / "channel-0.png").exists()
    strict((tmp_path / "s" / "top.json").read_text())


def test_compare_names_the_tensor_and_its_count(spoiled: Path, tmp_path: Path) -> None:
    done = hd(tmp_path, "compare", spoiled, "--biased", "--json")
    assert done.returncode == 2
    paragraph(done.stderr, f"`spoil` of `{spoiled}` holds 9 NaN and 48 Inf of 3,072 values", "--layers")
    assert strict(done.stdout)["exit_code"] == 2  # type: ignore[index]
    done = hd(tmp_path, "compare", spoiled, "--biased", "--layers", "conv", "--json")
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same conv over the same seeded random input, times NaN, +Inf, -Inf, 1 and 2."""
    root = tmp_path_factory.mktemp("scaled")
    for name in ("nan", "inf", "neginf", "fine", "double"):
        done = hd(root, "capture", *PLUGIN, "-m", f"{name}_net", "-l", "bad", "--random-input", "-o", name)
        assert done.returncode == 0, done.stderr
    return root


def _diff(root: Path, a: str, b: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = hd(root, "diff", a, b, "--json")
    found = strict(done.stdout)
    assert isinstance(found, dict)
    return done, found["tensors"][0]


def test_diff_a_nan_against_a_number_is_a_divergence_said_where(scaled: Path) -> None:
    done, bad = _diff(scaled, "nan", "fine")
    assert done.returncode == 1
    assert bad["status"] == "differs" and bad["out_of_tolerance"] == 1.0
    assert bad["cosine"] is None  # no element finite on both sides: not 1.0
    assert bad["first_index"] == [0, 0, 0, 0] and bad["first_values"][0] == "nan"
    fine = np.load(scaled / "fine" / "bad.npy")
    assert float(bad["first_values"][1]) == pytest.approx(float(fine[0, 0, 0, 0]), rel=1e-5)
    assert bad["nonfinite_a"] == fine.size and bad["nonfinite_b"] == 0
    assert f"bad holds {fine.size:,} NaN or Inf value(s) in `nan` and 0 in `fine`" in done.stderr
    plain = hd(scaled, "diff", "nan", "fine")
    assert "first divergence: bad at (0, 0, 0, 0): nan vs" in plain.stdout


def test_diff_inf_against_minus_inf_is_infinitely_far(scaled: Path) -> None:
    done, bad = _diff(scaled, "inf", "neginf")
    assert done.returncode == 1 and bad["status"] == "differs"
    assert bad["max_abs"] is None and bad["max_rel"] is None  # infinite: null in JSON, never 0
    plain = hd(scaled, "diff", "inf", "neginf")
    row = next(line for line in plain.stdout.splitlines() if line.startswith("bad "))
    assert row.split()[-5:-3] == ["inf", "inf"], row


def test_diff_cosine_stays_within_one(scaled: Path) -> None:
    done, bad = _diff(scaled, "fine", "double")  # b = 2a: cosine 1 exactly, whatever the rounding
    assert done.returncode == 1 and -1.0 <= bad["cosine"] <= 1.0
    a, b = (np.load(scaled / n / "bad.npy").ravel().astype(np.float64) for n in ("fine", "double"))
    assert bad["cosine"] == pytest.approx(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-12)
    same, bad = _diff(scaled, "fine", "fine")
    assert same.returncode == 0 and bad["cosine"] <= 1.0


def test_stats_and_show_count_and_name_them(spoiled: Path, tmp_path: Path) -> None:
    rows = strict(hd(tmp_path, "stats", spoiled, "--json").stdout)
    assert isinstance(rows, list)
    spoil = next(r for r in rows if r["name"] == "spoil")
    maps = np.load(spoiled / "spoil.npy")
    assert (spoil["nan"], spoil["inf"]) == (int(np.isnan(maps).sum()), int(np.isinf(maps).sum())) == (9, 48)
    shown = hd(tmp_path, "show", spoiled / "spoil.npy", "-o", tmp_path / "s.png", "--json")
    assert shown.returncode == 0
    assert "note: spoil holds 3 NaN and 16 Inf of 1,024 values, drawn in magenta" in shown.stderr
    strict(shown.stdout)
