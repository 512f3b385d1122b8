"""A real S3-compatible server on 127.0.0.1 for the tests: moto's, on a thread of the test process (its
buckets live in the process, so a server stopped and started again on the same port still holds them);
buckets made, filled and read through boto3; the environment a console script needs to reach it."""

from __future__ import annotations

import os
from typing import Any

import boto3
from common import free_port
from moto.server import ThreadedMotoServer

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3:
    """The server and a client of it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server: ThreadedMotoServer | None = None
        self.start()
        self.client: Any = boto3.client("s3", endpoint_url=self.endpoint, **_keys())

    def start(self) -> None:
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    @property
    def env(self) -> dict[str, str]:
        """The test process's environment with this server as the S3 endpoint."""
        return {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def bucket(self, name: str) -> str:
        """A new empty bucket, as its URL."""
        self.client.create_bucket(Bucket=name)
        return f"s3://{name}"

    def put(self, url: str, data: bytes) -> None:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, url: str) -> bytes:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        body: bytes = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def keys(self, url: str) -> list[str]:
        """Every object's key under a URL's prefix, sorted."""
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }
