"""hookdump's tries of a storage that does not answer are the requests the storage sees: a real HTTP
server on 127.0.0.1 answers every request as a busy S3 does (503 SlowDown) and counts them. botocore's and
s3fs's own retries do not multiply hookdump's, unless the user set botocore's."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import forkrun
import pytest
from common import paragraph

import hookdump
from hookdump import urls
from hookdump.errors import InputError, StorageError, UsageError

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
URL = "s3://busy/acts"
#: The machine's botocore retry settings and profile: the tests set their own.
MACHINE_S = ("AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_PROFILE")


class Busy(BaseHTTPRequestHandler):
    """Every request answered 503 with S3's SlowDown body; each one counted on the server."""

    server: BusyServer

    def answer(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        body = b"<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>busy</Message></Error>"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = answer

    def log_message(self, *args: object) -> None:
        pass


class BusyServer(ThreadingHTTPServer):
    """The server on 127.0.0.1 and the requests it saw (``"HEAD /bucket/key"``)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Busy)
        self.requests: list[str] = []


@pytest.fixture
def busy() -> Iterator[BusyServer]:
    server = BusyServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _env(server: BusyServer, tmp_path: Path, **more: str) -> dict[str, str]:
    """The console script's environment: the busy server as the endpoint, no ~/.aws of the machine's."""
    host, port = server.server_address[:2]
    mine = {k: v for k, v in os.environ.items() if k not in MACHINE_S}
    return {
        **mine,
        **KEYS,
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
        **more,
    }


def test_each_of_hookdump_s_tries_is_one_request_then_exit_5_naming_the_url(busy, tmp_path: Path) -> None:
    done = forkrun.run(["stats", URL], env=_env(busy, tmp_path, HOOKDUMP_STORAGE_ATTEMPTS="2"), cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    paragraph(done.stderr, f"`{URL}`", "did not answer after 2 tries (503)", "--resume")
    assert busy.requests == ["HEAD /busy/acts/manifest.json"] * 2


@pytest.mark.parametrize("where", ["AWS_MAX_ATTEMPTS", "the profile's max_attempts"])
def test_botocore_retries_the_user_set_are_kept_under_each_try(busy, tmp_path: Path, where: str) -> None:
    more = {"HOOKDUMP_STORAGE_ATTEMPTS": "2"}
    if where == "AWS_MAX_ATTEMPTS":
        more["AWS_MAX_ATTEMPTS"] = "2"
    else:
        (tmp_path / "aws-config").write_text("[default]\nmax_attempts = 2\n")
    done = forkrun.run(["stats", URL], env=_env(busy, tmp_path, **more), cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    assert len(busy.requests) == 2 * 2


def test_the_api_s_config_kwargs_retries_are_kept(busy, tmp_path: Path, monkeypatch) -> None:
    for key, value in _env(busy, tmp_path, HOOKDUMP_STORAGE_ATTEMPTS="1").items():
        monkeypatch.setenv(key, value)
    for key in MACHINE_S:
        monkeypatch.delenv(key, raising=False)
    options = {"config_kwargs": {"retries": {"total_max_attempts": 2}}}
    with pytest.raises(StorageError, match="did not answer after 1 try "):
        hookdump.open(URL, storage_options=options)
    assert len(busy.requests) == 2


def test_a_number_of_tries_that_is_not_one_is_exit_2(busy, tmp_path: Path) -> None:
    done = forkrun.run(
        ["stats", URL], env=_env(busy, tmp_path, HOOKDUMP_STORAGE_ATTEMPTS="many"), cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    paragraph(done.stderr, "HOOKDUMP_STORAGE_ATTEMPTS=many is not a number of tries", "whole number")
    assert busy.requests == []


def test_an_option_s3_does_not_take_is_exit_2_naming_its_key_not_its_value(busy, tmp_path: Path) -> None:
    option = ["--storage-option", "bogus=secret-value"]
    done = forkrun.run(["stats", URL, *option], env=_env(busy, tmp_path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    paragraph(done.stderr, f"The storage options given for `{URL}` (bogus) are not all ones `s3://` takes")
    assert "secret-value" not in done.stderr + done.stdout
    assert busy.requests == []


def test_a_keyword_error_without_storage_options_is_not_blamed_on_them() -> None:
    """With no storage options given, a TypeError about a keyword argument is the storage's own failure
    (an input that cannot be read, its text kept), not the paragraph about options the user never gave."""

    def work() -> None:
        raise TypeError("open() got an unexpected keyword argument 'block_size'")

    with urls.given({}), pytest.raises(InputError, match="block_size") as caught:
        urls.call(URL, work)
    assert "storage options" not in str(caught.value)
    with urls.given({"anon": True}), pytest.raises(UsageError, match=r"\(anon\) are not all"):
        urls.call(URL, work)
