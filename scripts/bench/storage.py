"""Object storage against the local disk, side by side in one run: the same photos (scikit-image's, cycled)
in webdataset tar shards, captured by ``hookdump capture`` as fresh processes, each input read from the
local disk or from a real S3-compatible server on 127.0.0.1 (moto's, started here; its input cache
emptied before every run, so each run fetches every shard), each capture written as ``.npy`` (the
baseline), as ``--format zarr`` on the local disk, or as ``--format zarr`` published to the S3 server.
Rounds interleaved, medians; images per second and peak RSS (the process's, ``os.wait4``). Goals (issue
45): the S3 read within 1.10x of the local disk, zarr within 1.05x of ``.npy``, the peak RSS of a capture
to the S3 server flat in the number of inputs (a quarter of them against all). ``--quick``: 128 photos,
``test_resnet``.

    .venv/bin/python scripts/bench/storage.py [--rounds 3] [--images 2048] [--shards 8] [--model resnet18]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import tarfile
from pathlib import Path

import harness
from photos import photos


def shards(folder: Path, source: Path, count: int) -> list[Path]:
    """The photos of ``source`` in ``count`` tar shards of ``folder`` (``train-000.tar``, ...), in order."""
    files = sorted(source.iterdir())
    made = []
    for s in range(count):
        path = folder / f"train-{s:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for i, file in enumerate(files[s::count]):
                info = tarfile.TarInfo(f"s{s}_{i:05d}.png")
                data = file.read_bytes()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        made.append(path)
    return made


def server() -> tuple[object, dict[str, str]]:
    """moto's S3 server on a free port of 127.0.0.1, with a bucket ``bench``; the environment to reach it."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # (a line a request otherwise)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    running = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    running.start()
    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}  # fmt: skip
    keys = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], **keys).create_bucket(Bucket="bench")
    return running, env


def main() -> None:
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--images", type=int, default=2048)
    options.add_argument("--shards", type=int, default=8)
    options.add_argument("--model", default="resnet18")
    options.add_argument("--layer", default="layer4")
    options.add_argument("--batch", type=int, default=64)
    args = harness.parse(
        options, quick={"images": 128, "shards": 2, "model": "test_resnet", "layer": "layer1"}
    )
    if not (harness.have("moto", "the S3 server") and harness.have("s3fs", "reading and writing s3://")):
        return
    with harness.workdir("hookdump-bench-storage-") as work:
        running, env = server()
        try:
            _measure(work, env, args)
        finally:
            running.stop()


def _measure(work: Path, env: dict[str, str], args: argparse.Namespace) -> None:
    import fsspec

    images, count = int(args.images), int(args.shards)
    local = shards(work, photos(work / "photos", images), count)
    shards(_made(work / "quarter"), photos(work / "photos-quarter", images // 4), count)
    os.environ.update(env)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for path in local:
        fs.put_file(str(path), f"bench/shards/{path.name}")
    cache = work / "cache"
    model = ["-m", args.model, "-l", args.layer, "--batch-size", str(args.batch), "-q", "--overwrite"]
    last = f"{count - 1:03d}"
    on_disk, on_s3 = str(work / f"train-{{000..{last}}}.tar"), f"s3://bench/shards/train-{{000..{last}}}.tar"

    def capture(inputs: str, out: str, *extra: str) -> harness.Run:
        shutil.rmtree(cache, ignore_errors=True)  # every run fetches its inputs again
        run = harness.process(
            [harness.HOOKDUMP, "capture", inputs, *model, "-o", out, *extra],
            {**env, "HOOKDUMP_CACHE": str(cache)},
            out=None if out.startswith("s3://") else Path(out),
        )
        run.figures["img/s"] = (images // 4 if "quarter" in out else images) / run.wall
        return run

    cases = {
        "tar on disk, npy": lambda: capture(on_disk, str(work / "a")),
        "tar on S3, npy": lambda: capture(on_s3, str(work / "b")),
        "tar on disk, zarr": lambda: capture(on_disk, str(work / "c"), "--format", "zarr"),
        "tar on disk, zarr to S3": lambda: capture(on_disk, "s3://bench/out", "--format", "zarr"),
        "a quarter, zarr to S3": lambda: capture(
            str(work / "quarter" / f"train-{{000..{last}}}.tar"), "s3://bench/quarter-out", "--format", "zarr"
        ),
    }
    results = harness.rounds(cases, args.rounds)
    base = "tar on disk, npy"
    notes = [
        harness.goal(results, "tar on S3, npy", base, "<=", 1.10),
        harness.goal(results, "tar on disk, zarr", base, "<=", 1.05),
        harness.goal(results, "tar on disk, zarr to S3", base, "<=", 1.05),
        "peak RSS, all the photos against a quarter, zarr to S3: x"
        f"{harness.ratio(results, 'tar on disk, zarr to S3', 'a quarter, zarr to S3', 'rss'):.2f}"
        " (goal: flat)",
    ]
    title = f"{images} photos in {count} tar shards, {args.model} {args.layer}, batch {args.batch}"
    harness.table(title, results, base, [harness.Column("img/s", "img/s", digits=1)], notes)


def _made(folder: Path) -> Path:
    folder.mkdir()
    return folder


if __name__ == "__main__":
    main()
