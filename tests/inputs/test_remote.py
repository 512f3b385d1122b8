"""Issue 45, the inputs behind URLs: tar shards, Parquet files, loose photos and ``@list`` files read from a
real S3-compatible server on 127.0.0.1 (moto's, ``s3server``) through fsspec give the capture of the same
inputs on the local disk, bitwise, each input named by its URL; what cannot be reached is one paragraph."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from common import SKIMAGE_DATA, inputs_of, paragraph
from dataset_inputs import MODEL, PHOTOS, hd


def _tar(samples: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in samples:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def remote(s3, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The six photos in a bucket three ways (3 tar shards of 2, a Parquet file, loose files, an @list of
    the loose ones) and on the local disk the same ways; the local loose files' capture."""
    root = tmp_path_factory.mktemp("remote")
    bucket = s3.bucket("inputs")
    (root / "loose").mkdir()
    for s in range(3):
        photos = [PHOTOS[2 * s + i] for i in range(2)]
        pairs = [
            (f"n{s}_{i}.{n.split('.')[1]}", (SKIMAGE_DATA / n).read_bytes()) for i, n in enumerate(photos)
        ]
        data = _tar([*pairs, *((f"n{s}_{i}.cls", str(s).encode()) for i in range(2))])
        s3.put(f"{bucket}/shards/train-{s:03d}.tar", data)
        (root / f"train-{s:03d}.tar").write_bytes(data)
    for i, name in enumerate(PHOTOS):
        shutil.copy(SKIMAGE_DATA / name, root / "loose" / f"{i}-{name}")
        s3.put(f"{bucket}/loose/{i}-{name}", (SKIMAGE_DATA / name).read_bytes())
    s3.put(f"{bucket}/list.txt", "".join(f"loose/{i}-{n}\n" for i, n in enumerate(PHOTOS)).encode())
    table = pa.table({"image": [(SKIMAGE_DATA / n).read_bytes() for n in PHOTOS], "label": list(range(6))})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=4)
    s3.put(f"{bucket}/photos.parquet", sink.getvalue().to_pybytes())
    done = hd(root, "capture", *MODEL, "loose", "--batch-size", "2", "-o", "files")
    assert done.returncode == 0, done.stderr
    return bucket, root


def test_shards_in_a_bucket_are_the_capture_of_the_same_shards_on_disk(s3, remote, tmp_path: Path) -> None:
    bucket, root = remote
    local = hd(
        tmp_path, "capture", *MODEL, str(root / "train-{000..002}.tar"), "--batch-size", "2", "-o", "disk"
    )
    assert local.returncode == 0, local.stderr
    shards = f"{bucket}/shards/train-{{000..002}}.tar"
    done = hd(tmp_path, "capture", *MODEL, shards, "--batch-size", "2", "-o", "tar", env=s3.env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tar" / "layer1.npy").read_bytes() == (tmp_path / "disk" / "layer1.npy").read_bytes()
    assert (tmp_path / "tar" / "layer1.npy").read_bytes() == (root / "files" / "layer1.npy").read_bytes()
    inputs = inputs_of(tmp_path / "tar")
    assert [r["path"] for r in inputs] == [
        f"{bucket}/shards/train-{s:03d}.tar::n{s}_{i}" for s in range(3) for i in range(2)
    ]
    assert [r["label"] for r in inputs] == [0, 0, 1, 1, 2, 2]
    assert [r["sha256"] for r in inputs] == [r["sha256"] for r in inputs_of(root / "files")]
    again = hd(
        tmp_path, "capture", *MODEL, f"{bucket}/shards/*.tar", "--batch-size", "2", "-o", "glob", env=s3.env
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "glob" / "layer1.npy").read_bytes() == (tmp_path / "tar" / "layer1.npy").read_bytes()


def test_a_parquet_file_loose_photos_and_a_list_in_a_bucket(s3, remote, tmp_path: Path) -> None:
    bucket, root = remote
    want = (root / "files" / "layer1.npy").read_bytes()
    for name, given in (("pq", f"{bucket}/photos.parquet"), ("loose", f"{bucket}/loose/"),
                        ("list", f"@{bucket}/list.txt")):  # fmt: skip
        done = hd(tmp_path, "capture", *MODEL, given, "--batch-size", "2", "-o", name, env=s3.env)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / name / "layer1.npy").read_bytes() == want, name
    assert inputs_of(tmp_path / "pq")[3]["path"] == f"{bucket}/photos.parquet::3"
    assert [r["path"] for r in inputs_of(tmp_path / "list")] == [
        f"{bucket}/loose/{i}-{n}" for i, n in enumerate(PHOTOS)
    ]


def test_unreachable_inputs_are_one_paragraph_each(s3, remote, tmp_path: Path) -> None:
    bucket, _ = remote
    cases = [
        (f"{bucket}/shards/nothing-*.tar", "matches no input"),
        (f"{bucket}/shards/train-009.tar", "does not exist"),
        ("s3://no-such-bucket/x.tar", "its bucket `no-such-bucket` does not exist"),
        ("nosuchscheme://bucket/x.png", "`nosuchscheme://` is none of them"),
    ]
    for given, words in cases:
        done = hd(tmp_path, "capture", *MODEL, given, "-o", "out", env=s3.env)
        assert done.returncode == 4, (given, done.stderr)
        paragraph(done.stderr, words)
        assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    bare = {
        k: v for k, v in s3.env.items() if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")
    }
    done = hd(
        tmp_path,
        "capture",
        *MODEL,
        f"{bucket}/shards/train-000.tar",
        "-o",
        "out",
        env={**bare, "HOME": str(tmp_path)},
    )
    assert done.returncode == 4, done.stderr
    assert "--storage-option anon=true" in paragraph(done.stderr, "No credentials")


def test_credentials_the_server_refuses_and_a_missing_package(tmp_path: Path) -> None:
    """A server that checks credentials (moto's, with authentication from its second request on): wrong
    keys are one paragraph, for an input (exit 4) and for --out (exit 2), the secret never echoed; without
    s3fs, the paragraph names the cloud extra."""
    import subprocess
    import sys

    from common import free_port

    port = free_port()
    moto = Path(sys.executable).with_name("moto_server")
    server = subprocess.Popen(
        [moto, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "1"},
    )  # fmt: skip
    try:
        import boto3

        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="a",
                              aws_secret_access_key="b", region_name="us-east-1")  # fmt: skip
        for _ in range(100):
            try:
                client.create_bucket(Bucket="guarded")  # the one request allowed without credentials
                break
            except Exception:
                time.sleep(0.1)
        secret = "not-the-secret-5e8c1"
        env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "nobody",
               "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
        read = hd(tmp_path, "capture", *MODEL, "s3://guarded/train-000.tar", "-o", "out", env=env)
        assert read.returncode == 4 and secret not in read.stderr, read.stderr
        paragraph(read.stderr, "refused to let hookdump read `s3://guarded/train-000.tar`", "credentials")
        out = hd(tmp_path, "capture", *MODEL, "--random-input", "-o", "s3://guarded/acts", env=env)
        assert out.returncode == 2 and secret not in out.stderr, out.stderr
        paragraph(out.stderr, "`s3://guarded/acts`", "credentials")
    finally:
        server.terminate()
        server.wait(timeout=30)
    hidden = tmp_path / "hidden"
    (hidden / "s3fs").mkdir(parents=True)
    (hidden / "s3fs" / "__init__.py").write_text("raise ImportError('hidden for this test')\n")
    env = {**os.environ, "PYTHONPATH": f"{hidden}:{os.environ.get('PYTHONPATH', '')}"}
    done = hd(tmp_path, "capture", *MODEL, "s3://any/train-000.tar", "-o", "out", env=env)
    assert done.returncode == 4, done.stderr
    paragraph(done.stderr, "needs the `s3fs` package", "pip install 'hookdump[cloud]'")


def test_file_urls_are_the_local_paths_they_name(remote, tmp_path: Path) -> None:
    """``file://`` is the local file system: its inputs read in place, its ``--out`` a local folder."""
    _, root = remote
    out = tmp_path / "acts"
    done = hd(tmp_path, "capture", *MODEL, f"file://{root}/loose", "--batch-size", "2", "-o", f"file://{out}")
    assert done.returncode == 0, done.stderr
    assert (out / "layer1.npy").read_bytes() == (root / "files" / "layer1.npy").read_bytes()
    assert inputs_of(out)[0]["path"].startswith(str(root / "loose"))
