"""Issue 45, a capture folder on object storage (``--out s3://...``, ``store/folder/remote.py``), against a
real S3-compatible server on 127.0.0.1 (moto's, ``s3server``): the capture is written to a local mirror
and published whole, manifest last; a finished capture, a user's object and another run's lease are refused
before any work; a run killed mid-way, or cut off from the server, is finished by ``--resume``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import forkrun
import pytest
from common import WAIT_S, paragraph
from dataset_inputs import MODEL, hd
from slow_runs import SLOW_BY_1, coffee_photos, kill_when, start_run, wait_for

from hookdump.store.folder.lease import LEASE
from hookdump.store.folder.remote import mirror


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    return coffee_photos(tmp_path / "photos", 6)


def _same(s3, url: str, folder: Path, names: list[str]) -> None:
    for name in names:
        assert s3.get(f"{url}/{name}") == (folder / name).read_bytes(), name


def test_a_capture_into_a_bucket_is_the_local_capture_published(s3, tmp_path: Path, photos: Path) -> None:
    bucket = s3.bucket("published")
    args = ("capture", *MODEL, photos, "--batch-size", "2", "--format", "npy,safetensors")
    assert hd(tmp_path, *args, "-o", "local").returncode == 0
    done = hd(tmp_path, *args, "-o", f"{bucket}/acts", env=s3.env)
    assert done.returncode == 0, done.stderr
    assert f"to {bucket}/acts/ in" in done.stdout and f"manifest: {bucket}/acts/manifest.json" in done.stdout
    names = ["inputs.parquet", "layer1.npy", "manifest.json", "tensors.safetensors"]
    assert s3.keys(f"{bucket}/acts") == [f"acts/{n}" for n in names]  # no lease, no scratch left
    _same(s3, f"{bucket}/acts", tmp_path / "local", ["layer1.npy", "tensors.safetensors", "inputs.parquet"])
    manifest = json.loads(s3.get(f"{bucket}/acts/manifest.json"))
    assert manifest["complete"] is True and manifest["options"]["out"] == f"{bucket}/acts"
    assert not mirror(f"{bucket}/acts").exists()  # the local copy went once published


def test_what_a_bucket_folder_holds_is_refused_as_a_local_folder_s_is(
    s3, tmp_path: Path, photos: Path
) -> None:
    url = s3.bucket("refusals") + "/acts"
    both = ("capture", *MODEL, "-l", "layer2", photos, "--batch-size", "3")
    assert hd(tmp_path, *both, "-o", url, env=s3.env).returncode == 0
    again = hd(tmp_path, *both, "-o", url, env=s3.env)
    assert again.returncode == 2 and "already holds a capture" in paragraph(again.stderr, "--overwrite")
    one = hd(tmp_path, "capture", *MODEL, photos, "--batch-size", "3", "-o", url, "--overwrite", env=s3.env)
    assert one.returncode == 0, one.stderr
    assert s3.keys(url) == [
        f"acts/{n}" for n in ("inputs.parquet", "layer1.npy", "manifest.json")
    ]  # layer2 gone
    s3.put(f"{s3.bucket('users')}/mine/layer1.npy", b"the user's own")
    refused = hd(tmp_path, "capture", *MODEL, photos, "-o", "s3://users/mine", env=s3.env)
    assert refused.returncode == 2, refused.stderr
    paragraph(refused.stderr, "`s3://users/mine/layer1.npy` is in the way", "hookdump replaces only its own")
    assert s3.get("s3://users/mine/layer1.npy") == b"the user's own"
    assert s3.keys("s3://users/mine") == ["mine/layer1.npy"]
    s3.put("s3://users/theirs/manifest.json", b'{"not": "hookdump"}')
    foreign = hd(tmp_path, "capture", *MODEL, photos, "-o", "s3://users/theirs", "--overwrite", env=s3.env)
    assert foreign.returncode == 2 and "not a hookdump manifest" in paragraph(foreign.stderr)
    missing = hd(tmp_path, "capture", *MODEL, photos, "-o", "s3://no-such-bucket/acts", env=s3.env)
    assert missing.returncode == 2 and "bucket does not exist" in paragraph(missing.stderr)


def test_killed_mid_run_then_resumed_gives_the_bytes_of_an_uninterrupted_run(
    s3, tmp_path: Path, photos: Path
) -> None:
    bucket = s3.bucket("resumed")
    args = ["capture", *SLOW_BY_1, str(photos), "--seed", "3"]
    whole = hd(tmp_path, *args, "-o", f"{bucket}/whole", env={**s3.env, "HOOKDUMP_TEST_SLEEP": "0"})
    assert whole.returncode == 0, whole.stderr
    env = {k: v for k, v in s3.env.items() if k.startswith(("AWS_", "HOOKDUMP_"))}
    run = start_run([*args, "-o", f"{bucket}/acts"], **env)
    kill_when(run, mirror(f"{bucket}/acts"), 2)
    assert s3.keys(f"{bucket}/acts") == [f"acts/{LEASE}"]  # nothing published but the dead run's lease
    done = hd(tmp_path, *args, "-o", f"{bucket}/acts", "--resume", env=s3.env)
    assert done.returncode == 0, done.stderr
    assert "resumed after 2 of 6 images" in done.stderr
    assert s3.get(f"{bucket}/acts/conv.npy") == s3.get(f"{bucket}/whole/conv.npy")
    assert s3.keys(f"{bucket}/acts") == [f"acts/{n}" for n in ("conv.npy", "inputs.parquet", "manifest.json")]


def test_a_second_run_is_refused_while_the_first_holds_the_lease(s3, tmp_path: Path, photos: Path) -> None:
    url = s3.bucket("leased") + "/acts"
    env = {k: v for k, v in s3.env.items() if k.startswith(("AWS_", "HOOKDUMP_"))}
    first = start_run(["capture", *SLOW_BY_1, str(photos), "-o", url], **env)
    deadline = time.monotonic() + WAIT_S
    while f"acts/{LEASE}" not in s3.keys(url):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    second = hd(tmp_path, "capture", *MODEL, photos, "-o", url, env=s3.env)
    assert second.returncode == 2, second.stderr
    paragraph(second.stderr, f"`{url}` is being written by another hookdump run", f"process {first.pid} on")
    _, err = first.communicate(timeout=WAIT_S)
    assert first.returncode == 0, err
    assert s3.keys(url) == [f"acts/{n}" for n in ("conv.npy", "inputs.parquet", "manifest.json")]


def test_the_server_stopped_mid_run_is_exit_5_and_resume_publishes_once_it_is_back(
    s3, tmp_path: Path, photos: Path
) -> None:
    url = s3.bucket("outage") + "/acts"
    env = {k: v for k, v in s3.env.items() if k.startswith(("AWS_", "HOOKDUMP_"))}
    run = start_run(["capture", *SLOW_BY_1, str(photos), "-o", url], HOOKDUMP_STORAGE_ATTEMPTS="2", **env)
    wait_for(".hookdump-partial/progress.json", mirror(url), run)
    s3.stop()
    try:
        _, err = run.communicate(timeout=WAIT_S)
    finally:
        s3.start()
    assert run.returncode == 5, err
    paragraph(err, f"`{url}", "did not answer", "--resume")
    assert os.path.isfile(mirror(url) / "manifest.json")  # the capture is whole, kept for its publish
    assert s3.keys(url) in ([], [f"acts/{LEASE}"])
    done = hd(tmp_path, "capture", *SLOW_BY_1, photos, "-o", url, "--resume", env=s3.env)
    assert done.returncode == 0, done.stderr
    assert "published the capture an earlier run finished" in done.stderr
    assert s3.keys(url) == [f"acts/{n}" for n in ("conv.npy", "inputs.parquet", "manifest.json")]


def test_two_ranks_into_a_bucket_publish_the_single_process_capture(
    s3, tmp_path: Path, photos: Path, short_tmp: Path
) -> None:
    """torch.distributed's environment set by hand (as a scheduler does, no torchrun): each rank captures
    its shard into the mirror, rank 0 joins them and publishes, under the one lease it holds for them all;
    the bucket holds the files one process writes, ``.npy`` and ``tensors.zarr`` alike."""
    from common import free_port

    bucket = s3.bucket("ranks")
    args = ["capture", *MODEL, str(photos), "--batch-size", "2", "--format", "npy,zarr", "--device", "cpu"]
    one = hd(tmp_path, *args, "-o", f"{bucket}/one", env=s3.env)
    assert one.returncode == 0, one.stderr
    base = {k: v for k, v in s3.env.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    base |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2",
             "TMPDIR": str(short_tmp)}  # fmt: skip
    command = [*args, "--workers", "0", "-o", f"{bucket}/two"]
    ranks = [forkrun.start(command, env={**base, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    ended = [rank.communicate(timeout=600) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], ended
    keys = [k.removeprefix("two/") for k in s3.keys(f"{bucket}/two")]
    assert keys == [k.removeprefix("one/") for k in s3.keys(f"{bucket}/one")] and LEASE not in keys
    for key in keys:
        if key != "manifest.json":
            assert s3.get(f"{bucket}/two/{key}") == s3.get(f"{bucket}/one/{key}"), key


def test_storage_options_from_a_config_table_are_used_and_never_printed_or_recorded(
    s3, tmp_path: Path, photos: Path
) -> None:
    """A ``[storage]`` table in ``--config`` reaches the bucket (here its endpoint, with none in the
    environment); ``--print-config`` and the manifest hold none of its values."""
    url = s3.bucket("configured") + "/acts"
    secret = s3.env["AWS_SECRET_ACCESS_KEY"]
    config = tmp_path / "run.toml"
    config.write_text(
        f'[capture]\nout = "{url}"\n\n[storage]\nendpoint_url = "{s3.endpoint}"\nsecret = "{secret}"\n'
        f'key = "{s3.env["AWS_ACCESS_KEY_ID"]}"\n'
    )
    env = {k: v for k, v in s3.env.items() if not k.startswith(("AWS_ENDPOINT", "AWS_ACCESS", "AWS_SECRET"))}
    done = hd(tmp_path, "capture", *MODEL, photos, "--config", config, env=env)
    assert done.returncode == 0, done.stderr
    manifest = s3.get(f"{url}/manifest.json").decode()
    assert s3.endpoint not in manifest and "storage" not in json.loads(manifest)["options"]
    printed = hd(tmp_path, "capture", *MODEL, photos, "--config", config, "--print-config", env=env)
    assert printed.returncode == 0, printed.stderr
    assert f'out = "{url}"' in printed.stdout and s3.endpoint not in printed.stdout
    assert "endpoint_url" not in printed.stdout and secret not in printed.stdout + done.stderr + done.stdout
