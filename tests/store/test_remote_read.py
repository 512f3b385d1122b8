"""Issue 45, captures on object storage read back, against the real S3 server (``s3server``): a Zarr store
published to a bucket opens with xarray and zarr straight from it, bitwise the ``.npy`` capture; every reader
command (``hookdump.open``, ``stats``, ``show``, ``diff``, ``compare``, ``top``, ``report``, ``merge``) takes
the capture's URL; what a reader would write beside a capture on a bucket needs a local place, but for
``report``, whose page goes beside the capture."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import xarray
import zarr
from common import paragraph
from dataset_inputs import MODEL, hd
from s3server import CREDENTIALS
from slow_runs import coffee_photos

import hookdump
from hookdump import urls


@pytest.fixture(scope="module")
def published(s3, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Six photos captured to the disk and to a bucket, ``npy,zarr``, in chunks of two inputs."""
    root = tmp_path_factory.mktemp("published")
    photos = coffee_photos(root / "photos", 6)
    url = s3.bucket("readers") + "/acts"
    args = ("capture", *MODEL, "-l", "layer2", photos, "--batch-size", "2", "--format", "npy,zarr")
    for out, env in ((str(root / "local"), None), (url, s3.env)):
        done = hd(root, *args, "-o", out, env=env)
        assert done.returncode == 0, done.stderr
    return url, root


def _options(s3) -> dict[str, object]:
    return {"endpoint_url": s3.endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip


def test_a_zarr_store_on_a_bucket_opens_with_xarray_and_zarr_bitwise_the_npy(s3, published) -> None:
    url, root = published
    assert any(k.startswith("acts/tensors.zarr/layer1/") for k in s3.keys(url))
    local = np.load(root / "local" / "layer1.npy")
    assert s3.get(f"{url}/layer1.npy") == (root / "local" / "layer1.npy").read_bytes()
    opened = xarray.open_zarr(f"{url}/tensors.zarr", storage_options=_options(s3))
    assert opened["layer1"].dims[0] == "input" and opened["layer1"].data.chunks[0] == (2, 2, 2)
    assert (
        np.array_equal(opened["layer1"].values, local)
        and opened["layer1"].values.tobytes() == local.tobytes()
    )
    group = zarr.open_group(f"{url}/tensors.zarr", mode="r", storage_options=_options(s3))
    assert np.array_equal(group["layer2"][:], np.load(root / "local" / "layer2.npy"))


def test_every_reader_takes_the_capture_s_url(s3, published, tmp_path: Path) -> None:
    url, root = published
    with urls.given(_options(s3)):
        opened = hookdump.open(url)
        assert np.array_equal(np.asarray(opened["layer1"]), np.load(root / "local" / "layer1.npy"))
    stats = hd(tmp_path, "stats", url, "--json", env=s3.env)
    assert stats.returncode == 0, stats.stderr
    assert {r["name"] for r in json.loads(stats.stdout)} == {"layer1", "layer2"}
    same = hd(tmp_path, "diff", url, root / "local", env=s3.env)
    assert same.returncode == 0, same.stderr + same.stdout
    shown = hd(tmp_path, "show", url, "--key", "layer1", "-o", tmp_path / "l1.png", env=s3.env)
    assert shown.returncode == 0 and (tmp_path / "l1.png").is_file(), shown.stderr
    beside = hd(tmp_path, "show", url, "--key", "layer1", env=s3.env)
    assert beside.returncode == 2 and "--output FOLDER" in paragraph(beside.stderr, "object storage")
    ranked = hd(tmp_path, "top", url, "-l", "layer2", "--no-png", "--json", env=s3.env)
    assert ranked.returncode == 0, ranked.stderr
    compared = hd(tmp_path, "compare", url, "--json", env=s3.env)
    assert compared.returncode == 0, compared.stderr
    page = hd(tmp_path, "report", url, env=s3.env)
    assert page.returncode == 0, page.stderr
    assert b"<html" in s3.get(f"{url}/index.html") and f"acts/{'.hookdump-files.json'}" in s3.keys(url)
    again = hd(tmp_path, "report", url, env=s3.env)  # its own page: replaced
    assert again.returncode == 0, again.stderr


def test_merge_reads_shards_from_a_bucket_and_publishes_the_single_process_capture(
    s3, published, tmp_path: Path
) -> None:
    url, root = published
    bucket = url.rsplit("/", 1)[0]
    args = ("capture", *MODEL, "-l", "layer2", root / "photos", "--batch-size", "2", "--format", "npy,zarr")
    for i in range(2):
        done = hd(tmp_path, *args, "--shard", f"{i}/2", "-o", f"{bucket}/shard{i}", env=s3.env)
        assert done.returncode == 0, done.stderr
    merged = hd(
        tmp_path, "merge", f"{bucket}/shard0", f"{bucket}/shard1", "-o", f"{bucket}/merged", env=s3.env
    )
    assert merged.returncode == 0, merged.stderr
    for name in ("layer1.npy", "layer2.npy"):
        assert s3.get(f"{bucket}/merged/{name}") == (root / "local" / name).read_bytes(), name
    opened = xarray.open_zarr(f"{bucket}/merged/tensors.zarr", storage_options=_options(s3))
    assert np.array_equal(opened["layer1"].values, np.load(root / "local" / "layer1.npy"))


def test_the_readme_s_bucket_round_trip_runs_as_pasted(tmp_path: Path) -> None:
    """The README's block that starts moto's server and goes through a bucket, run as one pasted block (on
    a free port) in a folder of the sample data: it prints the capture's shape as read back."""
    import re
    import subprocess
    import sys

    from common import CHECKOUT, free_port

    block = next(b for b in re.findall(r"```bash\n(.*?)```", (CHECKOUT / "README.md").read_text(), re.S)
                 if "moto_server" in b)  # fmt: skip
    block = block.replace("9000", str(free_port()))
    subprocess.run(
        [sys.executable, CHECKOUT / "scripts" / "sample_data.py", "sample-data"], cwd=tmp_path, check=True
    )
    bins = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bins}:{os.environ['PATH']}", "HOOKDUMP_CACHE": str(tmp_path / "cache")}
    script = "set -e\ntrap 'kill $server 2>/dev/null || true' EXIT\n" + block
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "(6, 512, 7, 7)" in done.stdout and "wrote 2 file(s) to s3://demo/acts/" in done.stdout
