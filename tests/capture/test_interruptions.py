"""A capture stopped from outside, as schedulers and terminals stop it: kill -9 of the main process while its
decoding workers live on, SIGTERM or Ctrl-C to the whole process group, and the same under torchrun; each
ends with the documented exit code, keeps its progress, and --resume finishes the single-process bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import forkrun
import pytest
from common import SKIMAGE_DATA, WAIT_S, inputs_of, torchrun
from helpers import in_session
from slow_runs import PLUGIN, images_done, mixed_photos

SLOW = ("--import", str(PLUGIN), "-m", "slow_net", "-l", "conv", "-l", "act", "--batch-size", "2")
FORMATS = ("--format", "npy,pt,safetensors")
DEADLINE = WAIT_S


def _run(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forkrun.run(args, env={**os.environ, "HOOKDUMP_TEST_SLEEP": "0.2", **(env or {})})


def _start(*args: object) -> forkrun.Started:
    """The console script in a process group of its own, as a terminal, Slurm or systemd starts it."""
    return forkrun.start(args, env={**os.environ, "HOOKDUMP_TEST_SLEEP": "0.2"})


def _wait_until(done, what: str, proc: forkrun.Started | None = None, seconds: float = DEADLINE) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before {what}: {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what}")
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] not in "ZX"
    except OSError:
        return False


def _same_capture(whole: Path, out: Path) -> None:
    names = sorted(p.name for p in whole.iterdir() if p.name != "manifest.json")
    assert names == sorted(p.name for p in out.iterdir() if p.name != "manifest.json")
    for name in names:
        assert (whole / name).read_bytes() == (out / name).read_bytes(), name
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (whole, out)]
    assert manifests[1]["complete"] is True and inputs_of(whole) == inputs_of(out)


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """24 photos and their uninterrupted capture (no sleep: nothing stops it), made once for the module:
    the tests only read both."""
    root = tmp_path_factory.mktemp("whole")
    photos, out = mixed_photos(root / "photos", 24), root / "whole"
    done = _run("capture", *SLOW, photos, *FORMATS, "-o", out, env={"HOOKDUMP_TEST_SLEEP": "0"})
    assert done.returncode == 0, done.stderr
    return photos, out


def test_kill_9_then_resume_at_once_with_decoding_workers(tmp_path: Path, whole: tuple[Path, Path]) -> None:
    """The workers inherit the lock's descriptor; they must not keep the folder locked for its dead owner."""
    photos, reference = whole
    out = tmp_path / "out"
    run = _start("capture", *SLOW, photos, *FORMATS, "-o", out)  # default --workers: more than one batch
    _wait_until(lambda: images_done(out) >= 4, "reached 4 images", run)
    workers = _children(run.pid)
    assert workers, "no decoding worker to outlive its parent"
    os.kill(run.pid, signal.SIGKILL)  # the main process only, as the OOM killer does
    run.wait(timeout=60)  # not communicate: the orphans hold its pipes open
    done = _run("capture", *SLOW, photos, *FORMATS, "-o", out, "--resume")
    assert done.returncode == 0, done.stderr
    assert "resumed after" in done.stderr
    _same_capture(reference, out)
    _wait_until(lambda: not any(_alive(w) for w in workers), "orphaned workers exited")
    run.communicate(timeout=60)


def test_a_worker_blocked_on_a_full_pipe_exits_with_its_killed_parent(tmp_path: Path) -> None:
    """Batches of 256 records fill the pipe to the main process; when it is SIGKILLed, the worker waits to
    hand over a batch nobody will read, where torch's own watch of the parent never runs. It exits anyway."""
    import numpy as np
    from PIL import Image

    (tmp_path / "tiny").mkdir()
    rng = np.random.default_rng(0)
    for i in range(1800):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(
            tmp_path / "tiny" / f"{i}.png"
        )
    args = ("capture", "-m", "test_resnet", "--input-size", "3,16,16", "-l", "layer1", "--reduce", "mean")
    run = forkrun.start(
        [*args, "--batch-size", "256", "--workers", "1", tmp_path / "tiny", "-o", tmp_path / "out"],
        env={**os.environ, "HOOKDUMP_TEST_KILL_AT": "checkpoint-1"},
    )
    assert run.wait(timeout=DEADLINE) == -signal.SIGKILL
    _wait_until(lambda: not in_session(run.pid), "the orphaned worker exited", seconds=60)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_process_group_stops_the_run_and_keeps_its_progress(
    tmp_path: Path, whole: tuple[Path, Path], sig: int, code: int
) -> None:
    """Slurm, systemd and torchrun signal the whole group, so the decoding workers get it too (three of them:
    with one worker the main process usually wins the race that lost the run)."""
    photos, reference = whole
    out = tmp_path / "out"
    run = _start("capture", *SLOW, photos, *FORMATS, "-o", out, "--workers", "3")
    _wait_until(lambda: images_done(out) >= 4, "reached 4 images", run)
    os.killpg(run.pid, sig)
    _, err = run.communicate(timeout=120)
    assert run.returncode == code, err
    assert f"error: interrupted ({code}): " in err and "--resume" in err and "Traceback" not in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["progress"]["images_done"] >= 4
    done = _run("capture", *SLOW, photos, *FORMATS, "-o", out, "--resume", "--workers", "3")
    assert done.returncode == 0, done.stderr
    _same_capture(reference, out)


def _torchrun(*args: object, tmp: Path, sleep: str = "0.2") -> tuple[list[str], dict[str, str]]:
    return torchrun(args, tmp, HOOKDUMP_TEST_SLEEP=sleep)


@pytest.mark.parametrize("workers", [(), ("--workers", "0")], ids=["default-workers", "no-workers"])
def test_sigterm_to_torchrun_keeps_each_ranks_progress_and_resume_finishes_it(
    tmp_path: Path, short_tmp: Path, whole: tuple[Path, Path], workers: tuple[str, ...]
) -> None:
    """torchrun forwards SIGTERM to each rank's process group; each rank exits 143 with the usual paragraph
    and keeps its folder; torchrun itself exits 1 (its SignalException)."""
    photos, reference = whole
    out = tmp_path / "out"
    command, env = _torchrun("capture", *SLOW, photos, *FORMATS, "-o", out, *workers, tmp=short_tmp)
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ranks = [out / ".hookdump-ranks" / f"rank-{r}" for r in (0, 1)]
    _wait_until(lambda: min(images_done(r) for r in ranks) >= 2, "both ranks checkpointed", run)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=300)
    assert run.returncode != 0
    for r, folder in enumerate(ranks):
        assert f"error: interrupted (143): rank {r}: " in err and "--resume" in err
        assert json.loads((folder / "manifest.json").read_text())["complete"] is False
    assert not (out / "manifest.json").exists()  # nothing presents itself as complete
    if not workers:  # the refusals read the ranks' folders, which are alike either way: checked once
        again = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        assert again.returncode != 0 and "holds a capture interrupted under torchrun" in again.stderr
        alone = _run("capture", *SLOW, photos, *FORMATS, "-o", out, "--resume")
        assert alone.returncode == 2 and "one process cannot resume it" in alone.stderr
    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    _same_capture(reference, out)


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[tuple[str | Path, ...], Path]:
    """Eight photos and two bad files, one in each half; the capture arguments, and the folder ``one`` they
    were run into once (for the module: the tests only read both)."""
    tmp_path = tmp_path_factory.mktemp("bad_inputs")
    photos = mixed_photos(tmp_path / "photos", 8)
    (photos / "p01b.png").write_text("not a picture")  # refused when the inputs are collected: shard 0's
    rocket = (SKIMAGE_DATA / "rocket.jpg").read_bytes()
    (photos / "p05b.jpg").write_bytes(rocket[: len(rocket) // 3])  # fails when decoded: shard 1's
    args = ("capture", "-m", "test_resnet", "-l", "conv1", "--batch-size", "2", "--skip-bad", photos)
    assert _run(*args, "-o", tmp_path / "one").returncode == 0
    return args, tmp_path / "one"


def _skip_notes(manifest: dict) -> list[str]:
    return [n for n in manifest["notes"] if "--skip-bad" in n]


def test_skip_bad_shards_list_their_own_bad_inputs_and_the_merge_each_once(
    tmp_path: Path, bad_inputs: tuple[tuple[str | Path, ...], Path]
) -> None:
    args, one_folder = bad_inputs
    for i in (0, 1):
        assert _run(*args, "-o", tmp_path / f"s{i}", "--shard", f"{i}/2").returncode == 0
    merged = _run("merge", tmp_path / "s0", tmp_path / "s1", "-o", tmp_path / "merged")
    assert merged.returncode == 0, merged.stderr
    folders = (one_folder, tmp_path / "s0", tmp_path / "s1", tmp_path / "merged")
    one, s0, s1, both = (json.loads((d / "manifest.json").read_text()) for d in folders)
    names = [[Path(s["path"]).name for s in m["skipped"]] for m in (one, s0, s1, both)]
    assert names == [["p01b.png", "p05b.jpg"], ["p01b.png"], ["p05b.jpg"], ["p01b.png", "p05b.jpg"]]
    assert both["skipped"] == one["skipped"]
    assert len(_skip_notes(both)) == 1 and _skip_notes(both) == _skip_notes(one)
    assert (one_folder / "conv1.npy").read_bytes() == (tmp_path / "merged" / "conv1.npy").read_bytes()
    # shards of another split of the same inputs: said, not taken for a repeated shard
    assert _run(*args, "-o", tmp_path / "t1", "--shard", "1/3").returncode == 0
    mixed = _run("merge", tmp_path / "s0", tmp_path / "s1", tmp_path / "t1", "-o", tmp_path / "m2")
    assert mixed.returncode == 4 and "split the inputs differently" in mixed.stderr
    assert "is shard 1/3" in mixed.stderr and "given twice" not in mixed.stderr


def test_skip_bad_under_torchrun_lists_each_bad_input_once(
    tmp_path: Path, short_tmp: Path, bad_inputs: tuple[tuple[str | Path, ...], Path]
) -> None:
    args, one_folder = bad_inputs
    command, env = _torchrun(*args, "-o", tmp_path / "ranks", tmp=short_tmp)
    ranks = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert ranks.returncode == 0, ranks.stderr[-3000:]
    one, both = (json.loads((d / "manifest.json").read_text()) for d in (one_folder, tmp_path / "ranks"))
    assert both["skipped"] == one["skipped"] and len(one["skipped"]) == 2
    assert len(_skip_notes(both)) == 1 and _skip_notes(both) == _skip_notes(one)
    assert (one_folder / "conv1.npy").read_bytes() == (tmp_path / "ranks" / "conv1.npy").read_bytes()


def test_torchrun_with_fewer_batches_than_ranks_idles_the_others_and_refuses_a_shard(
    tmp_path: Path, short_tmp: Path
) -> None:
    photos = mixed_photos(tmp_path / "photos", 3)
    args = ("capture", "-m", "test_resnet", "-l", "conv1", "--batch-size", "4", photos, *FORMATS)
    assert _run(*args, "-o", tmp_path / "one").returncode == 0
    command, env = _torchrun(*args, "-o", tmp_path / "ranks", tmp=short_tmp)
    ranks = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert ranks.returncode == 0, ranks.stderr[-3000:]
    _same_capture(tmp_path / "one", tmp_path / "ranks")
    command, env = _torchrun(*args, "-o", tmp_path / "s", "--shard", "0/2", tmp=short_tmp)
    shard = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert shard.returncode != 0 and "--shard 0/2 under torchrun" in shard.stderr
    assert "exitcode  : 2" in shard.stderr and not (tmp_path / "s").exists()


def test_an_interrupted_shard_resumes(tmp_path: Path, whole: tuple[Path, Path]) -> None:
    photos, _ = whole
    args = ("capture", *SLOW, photos, "--shard", "1/2")
    assert _run(*args, "-o", tmp_path / "shard", env={"HOOKDUMP_TEST_SLEEP": "0"}).returncode == 0
    out = tmp_path / "out"
    run = _start(*args, "-o", out)
    _wait_until(lambda: images_done(out) >= 2, "reached 2 images", run)
    os.killpg(run.pid, signal.SIGTERM)
    assert run.wait(timeout=120) == 143
    done = _run(*args, "-o", out, "--resume")
    assert done.returncode == 0, done.stderr
    _same_capture(tmp_path / "shard", out)


def test_one_process_refuses_or_overwrites_what_an_interrupted_torchrun_left(
    tmp_path: Path, whole: tuple[Path, Path]
) -> None:
    """A rank's folder made as a rank makes it (its shard, in OUT/.hookdump-ranks), interrupted."""
    photos, reference = whole
    out = tmp_path / "out"
    rank = out / ".hookdump-ranks" / "rank-0"
    run = _start("capture", *SLOW, photos, *FORMATS, "-o", rank, "--shard", "0/2")
    _wait_until(lambda: images_done(rank) >= 2, "reached 2 images", run)
    os.killpg(run.pid, signal.SIGTERM)
    assert run.wait(timeout=120) == 143
    plain = _run("capture", *SLOW, photos, *FORMATS, "-o", out)
    assert plain.returncode == 2 and "holds a capture interrupted under torchrun" in plain.stderr
    assert "--resume" in plain.stderr and "Traceback" not in plain.stderr
    again = _run("capture", *SLOW, photos, *FORMATS, "-o", out, "--overwrite")
    assert again.returncode == 0, again.stderr
    _same_capture(reference, out)  # the ranks' folder is gone with the rest


def test_sigterm_to_torchrun_while_a_finished_rank_waits_for_the_others(
    tmp_path: Path, short_tmp: Path
) -> None:
    """Three batches on two ranks: rank 0 is done after one and waits; it says its shard is kept."""
    photos = mixed_photos(tmp_path / "photos", 3)
    args = ("capture", "--import", PLUGIN, "-m", "slow_net", "-l", "conv", "--batch-size", "1", photos)
    assert _run(*args, "-o", tmp_path / "one", env={"HOOKDUMP_TEST_SLEEP": "0"}).returncode == 0
    out = tmp_path / "out"
    command, env = _torchrun(*args, "-o", out, "--workers", "0", tmp=short_tmp, sleep="3")
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _wait_until(lambda: (out / ".hookdump-ranks/rank-0/manifest.json").exists(), "rank 0 finished", run)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=300)
    assert "error: interrupted (143): rank 0: its shard is complete in " in err
    assert "error: interrupted (143): rank 1: " in err
    resume = env | {"HOOKDUMP_TEST_SLEEP": "0"}  # nothing to stop this time
    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600, env=resume)
    assert done.returncode == 0, done.stderr[-3000:]
    _same_capture(tmp_path / "one", out)


# --- issue 35 item 9: kill -9 before the first batch reached the disk -------------------------------------


@pytest.mark.parametrize("point", ["opened", "started"])
def test_a_capture_killed_before_its_first_batch_never_blocks_the_next(tmp_path: Path, point: str) -> None:
    """Killed with the scratch folder empty (``opened``: while the model loads) or holding only the run's
    record (``started``): a plain rerun starts, ``--resume`` starts from the first input and says so (its
    dry run too, writing nothing); both end with the bytes of an uninterrupted capture."""
    photos = mixed_photos(tmp_path / "photos", 4)
    args = ("capture", "-m", "test_resnet", "--input-size", "3,32,32", "-l", "layer1", "--batch-size", "2",
            photos, "--workers", "0")  # fmt: skip
    assert _run(*args, "-o", tmp_path / "whole").returncode == 0
    for how in ((), ("--resume",)):
        out = tmp_path / f"out{len(how)}"
        killed = _run(*args, "-o", out, env={"HOOKDUMP_TEST_KILL_AT": point})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        scratch = out / ".hookdump-partial"
        assert sorted(p.name for p in scratch.iterdir()) == ([] if point == "opened" else ["run.json"])
        said = f"note: --resume: the capture interrupted in {out} had written no batch yet: it starts from"
        if how:
            dry = _run(*args, "-o", out, *how, "--dry-run")
            assert dry.returncode == 0 and said in dry.stderr, dry.stderr
            assert scratch.is_dir() and not (out / "manifest.json").exists()  # the dry run wrote nothing
        done = _run(*args, "-o", out, *how)
        assert done.returncode == 0, done.stderr
        assert (said in done.stderr) == bool(how), done.stderr
        assert not scratch.exists()
        _same_capture(tmp_path / "whole", out)
