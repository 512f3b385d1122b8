"""A capture run as a whole: reproducible, alone in its folder, stopped cleanly, checked before any work,
honest about what it did, and recorded well enough to be made again."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from common import CHECKOUT, checkout_files, written_into_checkout
from safetensors.torch import save_file
from slow_runs import PLUGIN, SLOW_BY_1, coffee_photos, start_run, wait_for

MODEL = ("-m", "test_resnet")


def _scratch(out: Path) -> list[Path]:
    return sorted(out.glob(".hookdump-partial*")) if out.is_dir() else []


def _visible(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")}


def test_random_weights_come_from_the_seed_and_repeat_byte_for_byte(cli, tmp_path: Path) -> None:
    runs = {}
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        out = tmp_path / name
        result = cli("capture", *MODEL, "-l", "layer1", "--sample", "--seed", seed, "-o", out)
        assert result.exit_code == 0, result.stderr
        assert f"random init from --seed {seed}" in result.stderr
        runs[name] = (out / "layer1.npy").read_bytes()
        assert json.loads((out / "manifest.json").read_text())["model"]["seed"] == int(seed)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]
    # an independent oracle: timm's own model built from the same seed gives the same weights
    torch.manual_seed(0)
    state = timm.create_model("test_resnet").state_dict()
    checkpoint = tmp_path / "seed0.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(checkpoint))
    out = tmp_path / "ckpt"
    assert (
        cli("capture", *MODEL, "-l", "layer1", "--sample", "--checkpoint", checkpoint, "-o", out).exit_code
        == 0
    )
    assert (out / "layer1.npy").read_bytes() == runs["a"]


def test_the_seed_does_not_change_the_callers_random_state(tmp_path: Path) -> None:
    from hookdump import api

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    api.capture(api.InputSpec(random=True), ["conv1"], model="test_resnet", out=tmp_path / "o")
    assert torch.equal(torch.rand(3), expected)


def test_a_second_capture_into_a_running_ones_folder_is_refused(cli, tmp_path: Path) -> None:
    photos, out = coffee_photos(tmp_path / "photos", 40), tmp_path / "out"
    first = start_run(["capture", *SLOW_BY_1, str(photos), "-o", str(out)])
    wait_for(".hookdump.lock", out, first)
    wait_for(".hookdump-partial/progress.json", out, first)
    second = cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", out, "--overwrite")
    assert second.exit_code == 2, second.stderr
    assert f"is being written by another hookdump capture (pid {first.pid}" in second.stderr
    dry = cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", out, "--dry-run")
    assert dry.exit_code == 2 and "being written by another hookdump capture" in dry.stderr
    # SIGTERM (sent by `timeout`, CI time-outs, `docker stop`) stops it like Ctrl-C: exit 143, the lock is
    # gone, and the folder says the capture is incomplete
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 143, err
    assert "interrupted (143)" in err and "--resume" in err and "Traceback" not in err
    assert json.loads((out / "manifest.json").read_text())["complete"] is False
    assert not (out / ".hookdump.lock").exists()


def test_ctrl_c_exits_130_and_keeps_an_earlier_capture(cli, tmp_path: Path) -> None:
    photos, out = coffee_photos(tmp_path / "photos", 40), tmp_path / "out"
    assert cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", out).exit_code == 0
    before = _visible(out)
    run = start_run(["capture", *SLOW_BY_1, str(photos), "-o", str(out), "--overwrite"])
    wait_for(".hookdump-partial/progress.json", out, run)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert _visible(out) == before  # the finished capture is not damaged; the interrupted one waits beside it


def test_a_killed_runs_scratch_is_removed_by_the_next_run(cli, tmp_path: Path) -> None:
    photos, out = coffee_photos(tmp_path / "photos", 40), tmp_path / "out"
    assert cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", out).exit_code == 0
    killed = start_run(["capture", *SLOW_BY_1, str(photos), "-o", str(out), "--overwrite"])
    wait_for(".hookdump-partial/stream-0.npy", out, killed)
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    assert len(_scratch(out)) == 1 and (out / ".hookdump.lock").exists()  # what SIGKILL leaves
    again = cli("capture", *MODEL, "-l", "layer1", "--random-input", "-o", out, "--overwrite")
    assert again.exit_code == 0, again.stderr
    assert "removed 1 scratch folder(s)" in again.stderr and "interrupted capture" in again.stderr
    assert sorted(p.name for p in out.iterdir()) == ["layer1.npy", "manifest.json"]  # (one random input)


def test_json_stdout_holds_only_json_when_user_code_prints(cli, tmp_path: Path) -> None:
    args = ("--import", PLUGIN, "-m", "chatty_net")
    captured = cli("capture", *args, "-l", "conv", "--random-input", "-o", tmp_path / "o", "--json")
    assert captured.exit_code == 0, captured.stderr
    assert json.loads(captured.stdout)["options"]["model"] == "chatty_net"
    assert "building chatty_net" in captured.stderr and "forward of chatty_net" in captured.stderr
    listed = cli("list-modules", *args, "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [m["name"] for m in json.loads(listed.stdout)] == ["conv", "act", "pool", "fc"]
    dry = cli("capture", *args, "-l", "conv", "--random-input", "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.stdout)[0]["name"] == "conv"
    plain = cli("capture", *args, "-l", "conv", "--random-input", "-o", tmp_path / "p")
    assert "forward of chatty_net" in plain.stdout  # without --json, user code prints where it prints


def _mistakes(tmp_path: Path) -> list[tuple[tuple[str | Path, ...], int, str]]:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    torch.manual_seed(0)
    wrong = tmp_path / "vit.safetensors"
    save_file(timm.create_model("test_vit").state_dict(), str(wrong))
    cases = [
        (
            ("--checkpoint", tmp_path / "missing.safetensors", "--sample"),
            4,
            "missing.safetensors` does not exist",
        ),
        (("--checkpoint", wrong, "--sample"), 4, "does not fit test_resnet"),
        ((tmp_path / "no-such.jpg",), 4, "no-such.jpg` does not exist"),
        (("--sample", "--format", "npz"), 2, "Unknown --format `npz`"),
        (("--sample", "-o", blocker), 2, "is a file, not a folder"),
        (("--sample", "--batch-size", "0"), 2, "--batch-size 0 is not positive"),
        ((), 2, "No input given"),
        (("--sample", "-l", "layer1.0.act1@1"), 3, "asks for call 1, but layer1.0.act1 runs 1 time(s)"),
        (("--sample", "-l", "layer1"), 2, "already holds a capture"),
    ]
    if not torch.cuda.is_available():
        cases.append((("--sample", "--device", "cuda"), 2, "CUDA is not available"))
    return cases


def test_dry_run_fails_exactly_where_the_real_run_would(cli, tmp_path: Path) -> None:
    held = tmp_path / "held"
    assert cli("capture", *MODEL, "-l", "conv1", "--random-input", "-o", held).exit_code == 0
    for extra, code, text in _mistakes(tmp_path):
        out = held if text == "already holds a capture" else tmp_path / "out"
        args = ("capture", *MODEL, "-l", "conv1", "-o", out, *extra)
        dry, real = cli(*args, "--dry-run"), cli(*args)
        assert (dry.exit_code, real.exit_code) == (code, code), (extra, dry.stderr, real.stderr)
        assert text in dry.stderr and dry.stderr == real.stderr, (extra, dry.stderr, real.stderr)
        assert not (tmp_path / "out").exists()
    ok = cli("capture", *MODEL, "-l", "conv1", "--sample", "-o", tmp_path / "fine", "--dry-run")
    assert ok.exit_code == 0 and "would hook 1 module(s)" in ok.stdout
    assert not (tmp_path / "fine").exists()


def test_mistakes_are_found_before_the_real_model_is_built(cli, tmp_path: Path) -> None:
    builds = tmp_path / "builds.log"
    os.environ["HOOKDUMP_TEST_BUILDS"] = str(builds)
    try:
        args = ("capture", "--import", PLUGIN, "-m", "watched_net", "--random-input")
        for extra, code in (
            (("-l", "conv@1"), 3),
            (("-l", "nope"), 3),
            (("-l", "conv", "--checkpoint", tmp_path / "missing.pth"), 4),
            (("-l", "conv", tmp_path / "missing.jpg"), 2),  # images and --random-input: refused
        ):
            result = cli(*args, *extra, "-o", tmp_path / "o")
            assert result.exit_code == code, result.stderr
        assert not builds.exists()
        assert cli(*args, "-l", "conv", "-o", tmp_path / "o").exit_code == 0
        assert builds.read_text() == "built\n"  # once: the inventory ran on meta
    finally:
        del os.environ["HOOKDUMP_TEST_BUILDS"]


def test_options_that_would_do_nothing_say_so(cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = cli("capture", *MODEL, "-l", "conv1", "--random-input", "--target", "3", "-o", out)
    assert result.exit_code == 0, result.stderr
    note = "--target 3 is ignored without --grad"
    assert note in result.stderr
    assert any(note in n for n in json.loads((out / "manifest.json").read_text())["notes"])
    both = cli("list-modules", "test_resnet", "-m", "test_vit")
    assert both.exit_code == 2 and "Two models given: `test_resnet` and --model `test_vit`" in both.stderr
    assert cli("list-modules", "test_resnet", "-m", "test_resnet").exit_code == 0


def test_stopped_early_only_when_the_stop_skipped_something(cli, tmp_path: Path) -> None:
    for layer, skipped in (("layer1", True), ("fc", False)):
        out = tmp_path / layer
        result = cli("capture", *MODEL, "-l", layer, "--random-input", "-o", out)
        assert result.exit_code == 0, result.stderr
        assert json.loads((out / "manifest.json").read_text())["stopped_early"] is skipped
        assert ("stopped the forward pass" in result.stderr) is skipped


def test_safetensors_summary_names_one_file_and_its_keys(cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    result = cli(
        "capture", *MODEL, "-l", "conv1", "-l", "layer1", "--sample", "-o", out, "--format", "safetensors"
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"wrote 1 file(s) (2 tensors) to {out}/")
    assert lines[1].split()[0] == "tensors.safetensors[conv1]"
    assert lines[2].split()[0] == "tensors.safetensors[layer1]"


def test_files_get_the_users_usual_permissions(cli, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / "o"
        args = ("capture", *MODEL, "-l", "layer1", "--sample", "-o", out, "--format", "npy,pt,safetensors")
        assert cli(*args).exit_code == 0
        assert cli("show", out / "layer1.npy").exit_code == 0
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    finally:
        os.umask(old)
    drawn = {"layer1.png", ".hookdump-files.json"}  # show's picture and its record
    assert set(modes) == {
        "layer1.npy",
        "layer1.pt",
        "tensors.safetensors",
        "inputs.parquet",
        "manifest.json",
        *drawn,
    }
    assert set(modes.values()) == {0o644}, modes


def test_the_manifest_says_how_to_make_the_same_files_again(cli, tmp_path: Path, photos: Path) -> None:
    torch.manual_seed(0)
    checkpoint = tmp_path / "w.safetensors"
    save_file(timm.create_model("test_resnet").state_dict(), str(checkpoint))
    out = tmp_path / "o"
    result = cli(
        "capture", *MODEL, "-l", "layer*", "-l", "conv1.0", photos, "--checkpoint", checkpoint, "-o", out,
        "--batch-size", "2", "--what", "both", "--no-early-stop", "--seed", "7", "--import", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    options = manifest["options"]
    assert options["layer"] == ["layer*", "conv1.0"]  # as given, not resolved away
    assert (options["batch_size"], options["what"], options["early_stop"], options["seed"]) == (
        2,
        "both",
        False,
        7,
    )
    assert options["import"] == ["json"] and options["images"] == [str(photos)]
    assert manifest["model"]["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert manifest["cwd"] == os.getcwd()
    assert manifest["transform"]["crop_mode"] == "center"
    assert manifest["numpy_version"] == np.__version__
    import PIL

    assert manifest["pillow_version"] == PIL.__version__
    assert manifest["schema_version"] == 2 and manifest["complete"] is True


def test_the_demo_leaves_nothing_behind_so_it_runs_again(tmp_path: Path) -> None:
    """scripts/demo.sh writes only to a new temporary folder, never into the checkout, so a second run finds
    what the first found (no file in the checkout that was not there before, as the suite's own check has
    it); it shows the ModuleList refusal and the right layer."""
    script = CHECKOUT / "scripts" / "demo.sh"
    if not (script.parent.parent / ".venv" / "bin" / "hookdump").exists():
        pytest.skip("the demo runs from the checkout's .venv")
    before = checkout_files()
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert written_into_checkout(before) == []
    (made,) = tmp_path.iterdir()  # the one folder the demo made for its output
    assert made.name.startswith("hookdump-demo.") and (made / "out" / "manifest.json").is_file()
    assert "is a ModuleList: containers are never called" in proc.stderr
    assert "pos_block.3.proj.0.npy  output  (1, 1024, 7, 7)" in proc.stdout
