"""Issue 35 items 5-7: one policy for values that are not finite, in every reader of a capture: NaN and
Inf are counted and named, never silently dropped or compared away, and every JSON printed is valid JSON.
Through the real console script, on captures of plugin models that make NaN and Inf
(tests/plugins/nonfinite_plugin.py) and of test_vit from a checkpoint with a NaN weight; the numbers are
checked against numpy on the captured files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import forkrun
import numpy as np
import pytest
from common import PLUGINS, SKIMAGE_DATA, paragraph
from helpers import seeded
from PIL import Image
from read_back import check_links, section_id
from safetensors.torch import save_file

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
    assert bad["nonfinite_a"] == {"nan": fine.size, "inf": 0, "total": fine.size}
    assert bad["nonfinite_b"] == {"nan": 0, "inf": 0, "total": fine.size}
    said = [line for line in done.stderr.splitlines() if "holds" in line]  # the one phrasing, per side
    assert said == [
        f"note: bad in `nan` holds {fine.size:,} NaN and 0 Inf of {fine.size:,} values; a NaN or an"
        " infinity equals only the same on the other side; the cosine leaves them out"
    ]
    plain = hd(scaled, "diff", "nan", "fine")
    assert "first divergence: bad at (0, 0, 0, 0): nan vs" in plain.stdout


def test_diff_inf_against_minus_inf_is_infinitely_far(scaled: Path) -> None:
    done, bad = _diff(scaled, "inf", "neginf")
    assert done.returncode == 1 and bad["status"] == "differs"
    assert bad["max_abs"] is None and bad["max_rel"] is None  # infinite: null in JSON, never 0
    size = np.load(scaled / "inf" / "bad.npy").size
    assert bad["nonfinite_a"] == bad["nonfinite_b"] == {"nan": 0, "inf": size, "total": size}
    assert f"note: bad in `inf` holds 0 NaN and {size:,} Inf of {size:,} values\n" in done.stderr
    assert f"note: bad in `neginf` holds 0 NaN and {size:,} Inf of {size:,} values;" in done.stderr
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
    finite = maps[np.isfinite(maps)].astype(np.float64)  # the numbers are of the finite values, and say so
    assert spoil["mean"] == pytest.approx(finite.mean(), rel=1e-12) and spoil["max"] == finite.max()
    plain = hd(tmp_path, "stats", spoiled)
    assert plain.returncode == 0 and plain.stderr.splitlines() == [
        f"note: spoil holds 9 NaN and 48 Inf of {maps.size:,} values, counted apart: min, max, mean and std"
        " are of the finite values"
    ]
    shown = hd(tmp_path, "show", spoiled / "spoil.npy", "-o", tmp_path / "s.png", "--json")
    assert shown.returncode == 0
    assert "note: spoil holds 3 NaN and 16 Inf of 1,024 values, drawn in magenta" in shown.stderr
    strict(shown.stdout)


def test_show_top_k_says_how_it_ranked_them(spoiled: Path, tmp_path: Path) -> None:
    """--top-k ranks channels by the mean |activation| of their finite values, and says so, naming them."""
    done = hd(tmp_path, "show", spoiled / "spoil.npy", "--top-k", "2", "-o", tmp_path / "k.png", "--json")
    assert done.returncode == 0
    image = np.load(spoiled / "spoil.npy")[0]
    flat = image.reshape(len(image), -1)
    means = [np.abs(row[np.isfinite(row)]).mean() for row in flat]  # the oracle: numpy, channel by channel
    chosen = [t["channel"] for t in strict(done.stdout)["tiles"]]  # type: ignore[index]
    assert chosen == np.argsort(-np.array(means), kind="stable")[:2].tolist()
    nan, inf = int(np.isnan(image).sum()), int(np.isinf(image).sum())
    assert (
        f"note: --top-k: channel(s) 0, 1 of spoil hold NaN or Inf ({nan} NaN and {inf} Inf of {image.size:,}"
        " values): each is ranked by the mean |activation| of its finite values (one with none, last)"
    ) in done.stderr


def test_top_counts_them_and_says_which_channel_ranked_none(spoiled: Path, tmp_path: Path) -> None:
    done = hd(tmp_path, "top", spoiled, "-l", "spoil", "-k", "2", "--sheets", "s")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "  channel 0: 3 left out (NaN or infinite)" in lines
        and "  channel 1: 3 left out (NaN or infinite)" in lines
    )
    maps = np.load(spoiled / "spoil.npy")
    nan, inf = int(np.isnan(maps).sum()), int(np.isinf(maps).sum())
    assert (
        f"note: spoil (channels 0:4) holds {nan} NaN and {inf} Inf of {maps.size:,} values, the sheets draw"
        " them in magenta"
    ) in done.stderr
    one = hd(tmp_path, "top", spoiled, "-l", "spoil", "--channel", "1", "--no-png")
    assert f"note: spoil (channel 1) holds {int(np.isnan(maps[:, 1]).sum())} NaN and 0 Inf of" in one.stderr


def test_compare_reduce_counts_the_tensor_not_its_pool(spoiled: Path, tmp_path: Path) -> None:
    """Pooled, a NaN or an infinity spreads (inf - inf is NaN): the refusal counts the tensor's own values,
    as it does without --reduce, and numpy prints nothing."""
    maps = np.load(spoiled / "spoil.npy")
    counts = f"{int(np.isnan(maps).sum())} NaN and {int(np.isinf(maps).sum())} Inf of {maps.size:,} values"
    for how in ("mean", "max", "cls"):
        done = hd(tmp_path, "compare", spoiled, "--biased", "--reduce", how)
        assert done.returncode == 2
        paragraph(done.stderr, f"`spoil` of `{spoiled}` holds {counts}: its similarity is not defined")
    done = hd(tmp_path, "compare", spoiled, "--biased", "--reduce", "mean", "--layers", "conv", "--json")
    assert done.returncode == 0, done.stderr
    strict(done.stdout)


def test_report_names_them_on_the_page(spoiled: Path, tmp_path: Path) -> None:
    """The tensor's section says what it holds and how its numbers and picture treat them; top's section
    names the inputs each channel left out, and a channel with none ranked has no picture, said why."""
    out = tmp_path / "cap"
    shutil.copytree(spoiled, out)
    assert hd(tmp_path, "top", out, "-l", "spoil", "-k", "2").returncode == 0
    done = hd(tmp_path, "report", out, "--json")
    assert done.returncode == 0, done.stderr
    maps = np.load(out / "spoil.npy")
    said = (
        f"spoil holds {int(np.isnan(maps).sum())} NaN and {int(np.isinf(maps).sum())} Inf of {maps.size:,}"
        " values, counted apart: min, max, mean and std are of the finite values"
    )
    assert f"note: {said}\n" in done.stderr
    page = check_links(out)
    assert f"{said}; the picture draws them in magenta." in page.text[section_id(page, "spoil")]
    assert "holds" not in page.text[section_id(page, "conv")]
    channels = page.channels["top-spoil"]
    left = "astronaut.png (input 0), chelsea.png (input 1), coffee.png (input 2)"
    for c in (0, 1):
        assert "No picture: no input has a finite max here." in channels[c]
        assert f"left out (max NaN or infinite): {left}" in channels[c]
    assert "left out" not in channels[2] + channels[3]
    written = strict(done.stdout)["top"][0]["channels"]  # type: ignore[index]
    assert [len(c["excluded"]) for c in written] == [3, 3, 0, 0]


@pytest.fixture(scope="module")
def spoiled_vit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test_vit whose first block's qkv weight holds one NaN (a bad checkpoint): head 0 of blocks.0's
    attention is NaN throughout, and every block after it wholly NaN; the attention captured."""
    root = tmp_path_factory.mktemp("nanvit")
    model, path = seeded("test_vit", root, 0)
    state = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
    state["blocks.0.attn.qkv.weight"][0, 0] = float("nan")
    save_file(state, str(path))
    shutil.copy(SKIMAGE_DATA / "chelsea.png", root / "chelsea.png")
    done = hd(
        root, "capture", "-m", "test_vit", "--checkpoint", path, "-l", "blocks.0.attn", "-l", "blocks.1.attn",
        "--attention", "chelsea.png", "-o", "cap",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root / "cap"


def test_attention_pictures_count_them_and_call_no_head_even(spoiled_vit: Path, tmp_path: Path) -> None:
    """A head whose map holds no finite value is said so (not 'constant', not 'attends evenly'); the
    overlay and the rollout count what they met, and the rollout's picture is magenta where it is NaN."""
    first = np.load(spoiled_vit / "blocks.0.attn.attn.npy")[0]  # (heads, L, L) of image 0
    cls = first[:, 0, 1:]  # the class token's attention to the patches: what show draws per head
    nan = int(np.isnan(cls).sum())
    assert np.isnan(cls[0]).all() and np.isfinite(cls[1]).all()  # the oracle: head 0 NaN, head 1 fine
    grid = hd(tmp_path, "show", spoiled_vit, "--key", "blocks.0.attn.attn", "-o", tmp_path / "g.png")
    assert grid.returncode == 0
    assert f"note: blocks.0.attn.attn holds {nan} NaN and 0 Inf of {cls.size} values, drawn in magenta" in (
        grid.stderr
    )
    assert "1 of 2 drawn channels hold no finite value (0), drawn all magenta" in grid.stderr
    assert "constant" not in grid.stderr
    over = hd(
        tmp_path, "show", spoiled_vit, "--key", "blocks.0.attn.attn", "--overlay", spoiled_vit.parent /
        "chelsea.png", "-o", tmp_path / "o.png",
    )  # fmt: skip
    assert over.returncode == 0
    assert f"note: blocks.0.attn.attn holds {nan} NaN and 0 Inf of {cls.size} values" in over.stderr
    assert "head(s) 0 hold no finite value: drawn all magenta" in over.stderr
    assert "attend evenly" not in over.stderr
    rolled = hd(tmp_path, "show", spoiled_vit, "--rollout", "-o", tmp_path / "r.png")
    assert rolled.returncode == 0
    both = np.stack([np.load(spoiled_vit / f"blocks.{b}.attn.attn.npy")[0] for b in (0, 1)])
    assert np.isnan(both[1]).all()  # blocks.1 wholly NaN: so is every value of the rollout
    side = int(np.sqrt(first.shape[-1] - 1))
    assert (
        f"note: the attention of image 0 (blocks.0.attn.attn ... blocks.1.attn.attn) holds"
        f" {int(np.isnan(both).sum()):,} NaN and 0 Inf of {both.size:,} values, the rollout holds"
        f" {side * side} NaN and 0 Inf of {side * side} values, drawn in magenta"
    ) in rolled.stderr
    with Image.open(tmp_path / "r.png") as image:
        assert (np.asarray(image.convert("RGB")) == (255, 0, 255)).all()
