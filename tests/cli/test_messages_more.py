"""Issue 18's cases where exit 0 (or the wrong code) hid wrong or lost data, through the real console
script: closed standard streams, config values, dry runs, checkpoints, notes."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import forkrun
import numpy as np
import pytest
from cli_errors import EXE, TINY
from common import README, inputs_of, paragraph, readme_commands
from helpers import hub_unreachable


def closed(tmp_path: Path, args: tuple[object, ...], redirect: str) -> subprocess.CompletedProcess[str]:
    """The console script with a standard stream closed by the shell (``>&-``), as a cron job or a
    daemon may start it; the other stream, if open, is captured."""
    line = " ".join(shlex.quote(str(a)) for a in (EXE, *args))
    return subprocess.run(
        ["bash", "-c", f"exec {line} {redirect}"], capture_output=True, text=True, cwd=tmp_path
    )


# --- 12: closed standard streams -------------------------------------------------------------------------


@pytest.mark.parametrize("redirect", [">&-", "2>&-", ">&- 2>&- <&-"])
def test_capture_with_a_closed_stream_works(tmp_path: Path, chelsea: Path, redirect: str) -> None:
    out = tmp_path / "o"
    proc = closed(tmp_path, ("capture", chelsea, *TINY, "-o", out, "--json"), redirect)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert np.load(out / "layer1.npy").shape == (1, 32, 8, 8)
    assert json.loads((out / "manifest.json").read_text())["tensors"]
    if not redirect.startswith(">&-"):  # stdout open: the JSON is there, whole
        assert json.loads(proc.stdout)["tensors"]


@pytest.mark.parametrize("redirect", [">&-", "2>&-"])
def test_layer_error_with_a_closed_stream_exits_3(tmp_path: Path, chelsea: Path, redirect: str) -> None:
    proc = closed(tmp_path, ("capture", chelsea, "-m", "test_resnet", "-l", "nosuch", "-o", "o"), redirect)
    assert proc.returncode == 3, proc.stderr
    if redirect == ">&-":
        paragraph(proc.stderr, "`nosuch` is not a module of test_resnet")
    assert not (tmp_path / "o").exists()


# --- 13: --config values, --print-config --json, old manifests -------------------------------------------


def run(tmp_path: Path, *args: object) -> subprocess.CompletedProcess[str]:
    return forkrun.run(args, cwd=tmp_path)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('format = "xyz"', ("`format`", "--format `xyz`", "npy, pt, safetensors")),
        ("batch_size = 0", ("`batch_size`", "--batch-size 0 is not positive")),
    ],
)
def test_bad_value_in_a_config_names_file_and_line(tmp_path: Path, line: str, words: tuple[str, ...]) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'model = "test_resnet"\nlayer = ["layer1"]\n\n{line}\n')
    proc = run(tmp_path, "capture", "--random-input", "--config", cfg, "-o", "o")
    assert proc.returncode == 4, proc.stderr
    paragraph(proc.stderr, f"{cfg}, line 4", *words)
    assert not (tmp_path / "o").exists()
    key = line.split(" ")[0].replace("_", "-")  # the same value on the command line is a usage error
    proc = run(
        tmp_path, "capture", "--random-input", "--config", cfg, f"--{key}", line.split(" = ")[1].strip('"')
    )
    assert proc.returncode == 2 and str(cfg) not in proc.stderr, proc.stderr


def test_json_print_config_is_json_that_config_reads_back(tmp_path: Path) -> None:
    proc = run(tmp_path, "capture", *TINY, "--random-input", "--batch-size", "3", "--json", "--print-config")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed["options"]["batch_size"] == 3 and printed["options"]["layer"] == ["layer1"]
    (tmp_path / "run.json").write_text(proc.stdout)
    again = run(tmp_path, "capture", "--config", "run.json", "-o", "o")
    assert again.returncode == 0, again.stderr
    assert "schema_version" not in again.stderr
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["options"]["batch_size"] == 3


def test_manifest_of_another_schema_version_gets_a_note(tmp_path: Path) -> None:
    first = run(tmp_path, "capture", *TINY, "--random-input", "-o", "a")
    assert first.returncode == 0, first.stderr
    same = run(tmp_path, "capture", "--config", "a/manifest.json", "-o", "b")
    assert same.returncode == 0 and "schema_version" not in same.stderr, same.stderr
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    manifest["schema_version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(manifest))
    old = run(tmp_path, "capture", "--config", "old.json", "-o", "c")
    assert old.returncode == 0, old.stderr
    assert "note: old.json is a manifest of schema_version 1; hookdump" in old.stderr
    assert "--print-config" in old.stderr


# --- 14: --dry-run decodes what the run decodes -----------------------------------------------------------


def _truncated_jpeg(photo: Path, path: Path) -> Path:
    from PIL import Image

    with Image.open(photo) as image:
        image.convert("RGB").save(path, quality=90)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a download cut short: the header is whole
    return path


def _float_tiff(path: Path) -> Path:
    from PIL import Image

    Image.fromarray(np.linspace(0, 3, 32 * 32, dtype=np.float32).reshape(32, 32)).save(path)
    return path


@pytest.mark.parametrize("kind", ["truncated jpeg", "float tiff"])
def test_dry_run_refuses_what_the_run_refuses(tmp_path: Path, chelsea: Path, kind: str) -> None:
    bad = (
        _truncated_jpeg(chelsea, tmp_path / "cut.jpg")
        if kind == "truncated jpeg"
        else _float_tiff(tmp_path / "hdr.tif")
    )
    words = ("image file is truncated",) if kind == "truncated jpeg" else ("outside [0, 1]",)
    real = run(tmp_path, "capture", bad, *TINY, "-o", "o")
    assert real.returncode == 4, real.stderr
    dry = run(tmp_path, "capture", bad, *TINY, "-o", "o", "--dry-run")
    assert dry.returncode == 4, dry.stderr
    assert paragraph(dry.stderr, f"`{bad}`", *words) == paragraph(real.stderr)
    assert not (tmp_path / "o").exists()


def test_dry_run_with_skip_bad_says_what_it_would_leave_out(tmp_path: Path, chelsea: Path) -> None:
    bad = _truncated_jpeg(chelsea, tmp_path / "cut.jpg")
    dry = run(tmp_path, "capture", bad, chelsea, *TINY, "--skip-bad", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert f"note: --skip-bad would leave out 1 unreadable input(s) ({bad})" in dry.stderr
    assert json.loads(dry.stdout)[0]["bytes"] == 32 * 8 * 8 * 4  # one image's worth: the good one


# --- 16: options that do nothing say so; the dry run's total says what it counts --------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ("--shard-size", "1KB"),
            "--shard-size 1KB is ignored: it splits .safetensors files and --format is npy",
        ),
        (
            ("--shard-size", "2GB", "--format", "safetensors"),
            "--shard-size 2GB is more than the capture's about",
        ),
    ],
)
def test_shard_size_that_does_nothing_gets_a_note(tmp_path: Path, chelsea: Path, args, words: str) -> None:
    proc = run(tmp_path, "capture", chelsea, *TINY, *args, "-o", "o")
    assert proc.returncode == 0, proc.stderr
    assert f"note: {words}" in proc.stderr
    assert any(words in n for n in json.loads((tmp_path / "o" / "manifest.json").read_text())["notes"])
    assert not list((tmp_path / "o").glob("*-of-*"))
    dry = run(tmp_path, "capture", chelsea, *TINY, *args, "-o", "o2", "--dry-run")
    assert f"note: {words}" in dry.stderr


def test_dry_run_total_says_what_is_scratch(tmp_path: Path, chelsea: Path) -> None:
    one = 32 * 8 * 8 * 4  # layer1 of test_resnet at 32x32, float32: 8.2 KB
    dry = run(tmp_path, "capture", chelsea, *TINY, "--format", "safetensors", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would write about {one / 1000:.1f} KB for 1 input(s) (safetensors, float32);" in dry.stdout
    assert f"about {2 * one / 1000:.1f} KB of disk at the peak, while the .npy scratch copy" in dry.stdout
    real = run(tmp_path, "capture", chelsea, *TINY, "--format", "safetensors", "-o", "o")
    assert real.returncode == 0, real.stderr
    written = sum(p.stat().st_size for p in (tmp_path / "o").glob("*.safetensors"))
    assert one <= written < one + 1000  # the files the dry run said, header aside
    npy = run(tmp_path, "capture", chelsea, *TINY, "--dry-run")
    assert "of disk at the peak" not in npy.stdout  # npy alone has no scratch copy beyond its files


# --- 16 / 18: -l '' and a state-dict key -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["capture", "list-modules"])
def test_empty_layer_path_says_it_is_empty(tmp_path: Path, command: str) -> None:
    args = (
        ("--sample", "-m", "test_resnet", "-l", "", "-o", "o") if command == "capture" else ("test_resnet",)
    )
    proc = run(tmp_path, command, *args, *(("--filter", "") if command == "list-modules" else ()))
    assert proc.returncode == 3, proc.stderr
    text = paragraph(proc.stderr, "The layer path is empty", "unset shell variable", "--layer conv1.0")
    assert "is not a module" not in text
    assert not (tmp_path / "o").exists()


def test_state_dict_key_hooks_its_module(tmp_path: Path, chelsea: Path) -> None:
    base = ("capture", chelsea, "-m", "test_resnet", "--input-size", "3,32,32")
    key = run(tmp_path, *base, "-l", "layer1.0.conv1.weight", "-l", "layer1.0.bn1.running_var", "-o", "k")
    assert key.returncode == 0, key.stderr
    assert (
        "note: `layer1.0.conv1.weight` is a parameter (a state-dict key): hooking its module layer1.0.conv1"
        in (key.stderr)
    )
    module = run(tmp_path, *base, "-l", "layer1.0.conv1", "-l", "layer1.0.bn1", "-o", "m")
    assert module.returncode == 0, module.stderr
    for name in ("layer1.0.conv1", "layer1.0.bn1"):
        np.testing.assert_array_equal(
            np.load(tmp_path / "k" / f"{name}.npy"), np.load(tmp_path / "m" / f"{name}.npy")
        )
    assert any(
        "state-dict key" in n for n in json.loads((tmp_path / "k" / "manifest.json").read_text())["notes"]
    )


# --- 16: checkpoints that torch.save did not write ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (
            "pickle",
            ("is a plain Python pickle (protocol 4, from pickle.dump)", "torch.save(model.state_dict()"),
        ),
        ("safetensors", ("is a safetensors file with another extension", "Rename it to weights.safetensors")),
        ("npy", ("is a NumPy array file (.npy)", "torch.save(model.state_dict()")),
    ],
)
def test_checkpoint_that_torch_did_not_write(tmp_path: Path, kind: str, words: tuple[str, ...]) -> None:
    import pickle

    import timm
    from safetensors.torch import save_file

    path = tmp_path / "weights.pth"
    state = timm.create_model("test_resnet").state_dict()
    if kind == "pickle":
        path.write_bytes(pickle.dumps({k: v.tolist() for k, v in list(state.items())[:3]}, protocol=4))
    elif kind == "safetensors":
        save_file(state, str(path))
    else:
        np.save(tmp_path / "w.npy", np.zeros(3))
        (tmp_path / "w.npy").rename(path)
    proc = run(tmp_path, "capture", "--random-input", *TINY, "--checkpoint", path, "-o", "o")
    assert proc.returncode == 4, proc.stderr
    paragraph(proc.stderr, f"Checkpoint `{path}`", *words)
    assert "Warning" not in proc.stderr and "Unsupported operand" not in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("zipped", [True, False])
def test_checkpoint_that_torch_wrote_still_loads(tmp_path: Path, chelsea: Path, zipped: bool) -> None:
    import timm
    import torch
    from helpers import hand_hooks, photo_batch

    torch.manual_seed(3)
    model = timm.create_model("test_resnet").eval()
    path = tmp_path / "w.pth"
    torch.save(model.state_dict(), path, _use_new_zipfile_serialization=zipped)
    proc = run(
        tmp_path, "capture", chelsea, "-m", "test_resnet", "-l", "layer1", "--checkpoint", path, "-o", "o"
    )
    assert proc.returncode == 0, proc.stderr
    expected = hand_hooks(model, ["layer1"], photo_batch(model, chelsea))[0]["layer1"]
    np.testing.assert_allclose(np.load(tmp_path / "o" / "layer1.npy"), expected.numpy(), rtol=1e-5, atol=1e-6)


# --- 16: --pretrained without a network fails (or uses the cache) at once ---------------------------------


def test_pretrained_with_the_hub_unreachable_fails_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [EXE, "capture", *TINY, "--random-input", "--pretrained", "-o", "o"],
        capture_output=True, text=True, cwd=tmp_path, env=hub_unreachable(tmp_path), timeout=300,
    )  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 4, proc.stderr
    paragraph(
        proc.stderr, "the hub http://127.0.0.1:9 cannot be reached", "not in the local cache", "--checkpoint"
    )
    assert "Retrying" not in proc.stderr
    assert took < 30, took  # huggingface_hub's retries took 50 s; a bare start is a few seconds
    assert not (tmp_path / "o").exists()


def test_pretrained_with_the_hub_unreachable_uses_the_cache(tmp_path: Path, chelsea: Path) -> None:
    """The hub's cache layout, filled by hand (nothing is downloaded): the weights come from it."""
    from helpers import fill_hub_cache, hand_hooks, photo_batch

    model = fill_hub_cache(tmp_path, seed=5)
    proc = subprocess.run(
        [EXE, "capture", chelsea, "-m", "test_resnet", "-l", "layer1", "--pretrained", "-o", "o"],
        capture_output=True, text=True, cwd=tmp_path, env=hub_unreachable(tmp_path), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "note: weights: timm pretrained (from the local cache: the hub http://127.0.0.1:9 cannot be" in (
        proc.stderr
    )
    expected = hand_hooks(model, ["layer1"], photo_batch(model, chelsea))[0]["layer1"]
    np.testing.assert_allclose(np.load(tmp_path / "o" / "layer1.npy"), expected.numpy(), rtol=1e-5, atol=1e-6)


# --- 16: an animated GIF: frame 0, said ---------------------------------------------------------------------


def test_animated_gif_says_frame_0_was_used(tmp_path: Path, photos: Path) -> None:
    from PIL import Image

    frames = [Image.open(photos / n).convert("RGB").resize((64, 48)) for n in ("chelsea.png", "coffee.png")]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    with Image.open(tmp_path / "anim.gif") as gif:
        gif.convert("RGB").save(tmp_path / "first.png")  # frame 0 as the GIF holds it (its palette)
    proc = run(tmp_path, "capture", "anim.gif", *TINY, "-o", "o")
    assert proc.returncode == 0, proc.stderr
    assert "note: 1 input(s) hold several frames, an animation or pages: anim.gif (2 frames); frame 0" in (
        proc.stderr
    )
    record = inputs_of(tmp_path / "o")[0]
    assert record["frames"] == 2 and record["frame_used"] == 0
    first = run(tmp_path, "capture", "first.png", *TINY, "-o", "f")
    assert first.returncode == 0 and "frames" not in first.stderr, first.stderr
    np.testing.assert_array_equal(
        np.load(tmp_path / "o" / "layer1.npy"), np.load(tmp_path / "f" / "layer1.npy")
    )


# --- 16: photos in the output folder, left out of a folder walk, are said ----------------------------------


def test_photos_inside_out_left_out_of_the_walk_get_a_note(tmp_path: Path, photos: Path) -> None:
    (photos / "acts").mkdir()
    (photos / "coffee.png").rename(photos / "acts" / "coffee.png")  # a photo of the user's, in --out
    proc = run(tmp_path, "capture", photos, *TINY, "-o", photos / "acts", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    note = (
        f"note: the folder walk left out `{photos / 'acts'}`, the output folder (--out), and the 1 image(s)"
    )
    assert note in proc.stderr
    assert "for 2 input(s)" in proc.stdout  # chelsea and more/astronaut
    real = run(tmp_path, "capture", photos, *TINY, "-o", photos / "acts")
    assert real.returncode == 0 and note in real.stderr, real.stderr
    manifest = json.loads((photos / "acts" / "manifest.json").read_text())
    assert len(inputs_of(photos / "acts")) == 2 and any("left out" in n for n in manifest["notes"])
    plain = run(tmp_path, "capture", photos / "more", *TINY, "-o", photos / "acts2")
    assert "folder walk left out" not in plain.stderr


# --- 16: the advice after an interrupted --overwrite run works when followed -----------------------


def test_advice_after_an_interrupted_overwrite_run_works(tmp_path: Path) -> None:
    import signal

    from slow_runs import SLOW_BY_3, images_done, mixed_photos, start_run, wait_for

    photos, out = mixed_photos(tmp_path / "photos", 12), tmp_path / "out"
    args = ["capture", *SLOW_BY_3, str(photos), "-o", str(out)]
    assert run(tmp_path, *args).returncode == 0  # a finished capture, then a run that replaces it
    again = [*args, "--overwrite"]
    started = start_run(again)
    wait_for(".hookdump-partial/progress.json", out, started)
    while images_done(out) < 3:  # polled, not spun: the capture needs the cores
        assert started.poll() is None, started.communicate()
        time.sleep(0.02)
    started.send_signal(signal.SIGTERM)
    stderr = started.communicate(timeout=120)[1]
    assert started.returncode == 143, stderr
    # on a slow machine the plain progress line (every 5 s off a terminal) may come before the error
    stderr = "\n".join(line for line in stderr.splitlines() if not line.startswith("hookdump: "))
    advice = paragraph(stderr, "images reached", "Rerun the same command with --resume")
    # follow the advice to the letter
    follow = [a for a in again if a != "--overwrite"] if "in place of --overwrite" in advice else again
    done = run(tmp_path, *follow, "--resume")
    assert done.returncode == 0, f"{advice}\n{done.stderr}"
    assert "resumed after" in done.stderr


# --- 16: --reduce mean / max of token maps leave the prefix tokens out, as timm's pooling does -------------


@pytest.mark.parametrize("how", ["mean", "max"])
def test_reduce_leaves_prefix_tokens_out_as_timm_pools(tmp_path: Path, chelsea: Path, how: str) -> None:
    import timm
    import torch
    from helpers import hand_hooks, photo_batch

    proc = run(tmp_path, "capture", chelsea, "-m", "test_vit2", "-l", "blocks.1", "--reduce", how, "-o", "o")
    assert proc.returncode == 0, proc.stderr
    note = f"--reduce {how} left out the first 1 token(s) (class / register tokens) of the token maps of"
    assert f"note: {note} blocks.1," in proc.stderr
    assert any(note in n for n in json.loads((tmp_path / "o" / "manifest.json").read_text())["notes"])
    torch.manual_seed(0)
    model = timm.create_model("test_vit2").eval()  # hookdump's random weights are drawn from --seed 0 too
    tokens = hand_hooks(model, ["blocks.1"], photo_batch(model, chelsea))[0]["blocks.1"]
    assert tokens.shape[1] == 101 and model.num_prefix_tokens == 1  # the class token, then 10 x 10 patches
    # mean: timm's own pooling (global_pool='avg' skips num_prefix_tokens); max: by hand, the same tokens
    expected = model.pool(tokens) if how == "mean" else tokens[:, model.num_prefix_tokens :].amax(1)
    np.testing.assert_allclose(
        np.load(tmp_path / "o" / "blocks.1.npy"), expected.numpy(), rtol=1e-5, atol=1e-6
    )


# --- 18: the README's examples (and each docs/ page's), pasted in order into one folder -------------------

PAGES = [README, *sorted((README.parent / "docs").glob("*.md"))]  # each page's examples are pasted alone
# folders each page's examples are known to write: the commands are still found there
WRITES = {
    "README.md": {"hookdump-out", "out2", "cat", "merged"},
    "capture.md": {"globs", "levels", "grads", "att"},
    "datasets.md": {"acts", "acts-ranks", "acts-merged"},
    "pictures.md": {"out", "attn", "page"},
    "stats.md": {"stats-demo"},
    "scripts-and-ci.md": {"resnet", "resnet2"},
}


def _written_folder(command: str) -> str | None:
    """The folder a README command writes a capture into, or checks (--dry-run); None: it has none, or
    continues one."""
    words = shlex.split(command.split(">")[0])
    if "hookdump" in words:
        words = words[words.index("hookdump") :]
    if len(words) < 2 or words[:2] not in (["hookdump", "capture"], ["hookdump", "merge"]):
        return None
    if {"--print-config", "--resume"} & set(words):
        return None  # --resume continues the folder an interrupted run left
    for flag in ("-o", "--out"):
        if flag in words:
            return words[words.index(flag) + 1]
    return "hookdump-out"  # (a --dry-run checks it, and is refused when a capture is there, but writes none)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_readme_examples_each_write_their_own_folder(page: Path) -> None:
    """Pasted in order, no example of the README (or of a page of docs/) is refused for a folder an earlier
    one of that page filled (exit 2); one that is shown failing (an `error:` line after it) writes nothing."""
    taken: dict[str, str] = {}
    for command, printed in readme_commands(page):
        folder = _written_folder(command)
        if folder is None or any(line.lstrip("# ").startswith("error:") for line in printed):
            continue
        assert folder not in taken or "--overwrite" in command, (
            f"`{command}` writes {folder}/, which `{taken[folder]}` filled before it"
        )
        if "--dry-run" not in command:
            taken[folder] = command
    assert WRITES.get(page.name, set()) <= set(taken), taken


def test_readme_first_examples_run_in_order_in_one_folder(tmp_path: Path) -> None:
    """The README's first example block, pasted into a shell in one new folder (with the checkout's bundled
    photo, plugins and scripts beside it, as in a checkout): each command exits as the README says. (The
    block "Capture, one example each", now in docs/capture.md, ran so too when this test was written: 114 s
    on 2 cores; the test above keeps its folders apart.)"""
    import re

    root = README.parent
    for part in ("hookdump/data", "tests/plugins", "scripts"):
        shutil.copytree(root / part, tmp_path / part)
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    commands = [c for c, _ in readme_commands()]
    first = [line for line in blocks[1].splitlines() if line.strip() and not line.startswith("#")]
    assert "python scripts/lite0_checkpoint.py lite0.safetensors" in first  # the test extra's weights
    assert all(line.split("  #")[0].strip() in commands for line in first)
    bin_dir = str(Path(EXE).parent)  # `hookdump` and `python` as the README's venv has them
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for line in first:
        words = shlex.split(line.split("  #")[0], comments=True)
        if words[0] == "hookdump" and not set("|<>;&$`") & set(line.split("  #")[0]):
            proc = forkrun.run(words[1:], cwd=tmp_path, env=env)  # the same as bash would run, forked
        else:
            proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=tmp_path, env=env)
        want = 3 if "--layer pos_block -o" in line else 0  # the seed's mistake, shown refused
        assert proc.returncode == want, f"{line}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr
