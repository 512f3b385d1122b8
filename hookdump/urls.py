"""A place a URL names (``s3://bucket/key``, ``gs://``, ``hf://``, ``file://``, ``memory://``): its file
system through fsspec, with the storage options in force (``--storage-option KEY=VALUE``, a ``[storage]``
table in ``--config``, the API's ``storage_options=``; credentials from the usual places: the environment,
``~/.aws``), every call to it retried a bounded number of times when the network fails, and every way of
not reaching it one paragraph naming the URL (never an option's value: they may be credentials). A local
path never comes here: it keeps the local code path and its speed."""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .errors import HookdumpError, InputError, StorageError, UsageError

T = TypeVar("T")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
#: The package behind each scheme that fsspec does not carry itself, all in hookdump's ``cloud`` extra.
PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "hf": "huggingface_hub"}
EXTRA = "cloud"
ATTEMPTS = int(os.environ.get("HOOKDUMP_STORAGE_ATTEMPTS") or 5)  # tries of a call: then the network is down
#: Failures of the network (the server down or slow, a dropped connection) by exception name, and by the
#: error code a storage service answers (throttling, its own trouble): worth trying again.
NETWORK = frozenset(
    [
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ClientOSError",
        "TimeoutError",
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ResponseStreamingError",
    ]
)
BUSY = frozenset(
    ["SlowDown", "Throttling", "RequestTimeout", "InternalError", "ServiceUnavailable", "500", "503"]
)
NO_CREDENTIALS = frozenset(["NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"])
REFUSED = frozenset(
    ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "InvalidToken", "ExpiredToken"]
)
_options: dict[str, Any] = {}  # the storage options in force (``given``)
_systems: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}
_CREDENTIAL_ENV = ("AWS_", "GOOGLE_", "GCS", "HF_", "FSSPEC_")


def cache() -> Path:
    """Where hookdump keeps what it fetched and what it publishes (``$HOOKDUMP_CACHE``, default
    ``~/.cache/hookdump``)."""
    return Path(os.environ.get("HOOKDUMP_CACHE") or Path.home() / ".cache" / "hookdump").absolute()


def is_url(text: object) -> bool:
    """Whether ``text`` is a URL (``scheme://...``) rather than a local path (``file://`` is a local path:
    ``plain``)."""
    return isinstance(text, str) and _SCHEME.match(text) is not None and scheme(text) != "file"


def plain(text: str) -> str:
    """A ``file://`` URL as its local path (``file:///data/x`` -> ``/data/x``); anything else as it is."""
    return text[len("file://") :] if text.lower().startswith("file://") else text


def scheme(url: str) -> str:
    """``s3://bucket/key`` -> ``s3``."""
    found = _SCHEME.match(url)
    return found[1].lower() if found else ""


def join(url: str, *names: str) -> str:
    """``s3://b/out`` + ``a.npy`` -> ``s3://b/out/a.npy``."""
    return "/".join([url.rstrip("/"), *(n.strip("/") for n in names)])


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value): ``true``/``false`` a bool, a number a number, else the text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(
            f"--storage-option takes KEY=VALUE, not `{key.strip() or text}`.",
            "e.g. --storage-option anon=true, --storage-option endpoint_url=http://127.0.0.1:9000",
        )
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return key.strip(), lowered == "true"
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return key.strip(), kind(value)
    return key.strip(), value


@contextlib.contextmanager
def given(options: dict[str, Any] | None) -> Iterator[None]:
    """The storage options in force for the block (the command's or the API call's; None: those in force
    already), as before after it."""
    global _options
    before = _options
    _options = dict(before if options is None else options)
    try:
        yield
    finally:
        _options = before


def filesystem(url: str, role: str = "input") -> tuple[Any, str]:
    """The fsspec file system of ``url`` with the options in force, and the path within it; an unknown
    scheme or a missing package is one paragraph (``role``: ``input`` exit 4, ``out`` exit 2)."""
    import fsspec  # for speed: only a URL needs it (torch imports it anyway)

    name = scheme(url)
    if name not in fsspec.available_protocols():
        raise _refusal(role)(
            f"`{url}`: hookdump reads and writes local paths and the URLs fsspec knows; `{name}://` is none"
            " of them.",
            "Use s3://, gs://, hf://, file:// (or a local path), or install the fsspec package for that"
            " scheme.",
        )
    package = PACKAGES.get(name)
    if package is not None:
        try:
            __import__(package)
        except ImportError as exc:
            raise _refusal(role)(
                f"`{url}` needs the `{package}` package, which is not installed ({exc}).",
                f"Install hookdump's {EXTRA} extra: pip install 'hookdump[{EXTRA}]'"
                f" (or pip install {package}).",
            ) from exc
    try:
        fs = _system(name)
    except (TypeError, ValueError) as exc:
        keys = ", ".join(sorted(_options)) or "none"
        raise UsageError(
            f"The storage options given for `{url}` ({keys}) are not ones `{name}://` takes: {exc}",
            "Check the --storage-option keys (the file system's own: anon, endpoint_url, profile, ...).",
        ) from exc
    path = fs._strip_protocol(url)
    return fs, str(path)


def _system(name: str) -> Any:
    """One file system a scheme, storage options and credentials' environment (a server given by
    ``AWS_ENDPOINT_URL`` is read when the file system is made, so another one makes another)."""
    import fsspec  # for speed: only a URL needs it

    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_CREDENTIAL_ENV)))
    key = (name, repr(sorted(_options.items())), env)
    if key not in _systems:
        _systems[key] = fsspec.filesystem(name, skip_instance_cache=True, **_options)
    return _systems[key]


def call(url: str, work: Callable[[], T], role: str = "input", what: str = "reach") -> T:
    """``work()`` on ``url``, tried again with a growing pause (0.5 s, 1, 2, 4) when the network fails, at
    most ``ATTEMPTS`` times; then, or at once for any other failure, the error paragraph naming the URL."""
    for attempt in range(ATTEMPTS):
        try:
            return work()
        except HookdumpError:
            raise
        except Exception as exc:  # the libraries behind fsspec raise many kinds
            if not transient(exc) or attempt == ATTEMPTS - 1:
                raise refusal(url, exc, role, what, attempt + 1) from exc
            time.sleep(0.5 * 2**attempt * (0.75 + random.random() / 2))
    raise AssertionError("unreachable")


def transient(exc: BaseException) -> bool:
    """Whether a failure is the network's (the server down or slow, a dropped connection, throttling):
    worth trying again, and the run resumable once it is back."""
    return type(exc).__name__ in NETWORK or _code(exc) in BUSY


def refusal(url: str, exc: BaseException, role: str, what: str, attempts: int = 1) -> HookdumpError:
    """One paragraph for a failure to ``what`` (reach, read, write, list) ``url``: the network down (exit 5,
    resumable), no credentials, credentials refused, a bucket or object that is not there."""
    if transient(exc):
        return StorageError(
            f"Could not {what} `{url}`: the storage did not answer after {attempts} tries"
            f" ({type(exc).__name__}).",
            "Check the network and the endpoint (AWS_ENDPOINT_URL, --storage-option endpoint_url=...), then"
            " rerun the same command (a capture: with --resume; what was committed is kept).",
        )
    name, code = type(exc).__name__, _code(exc)
    error = _refusal(role)
    if name in NO_CREDENTIALS:
        return error(
            f"No credentials to {what} `{url}` ({name}).",
            "Set them the usual way (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws), or,"
            " for a public bucket, pass --storage-option anon=true.",
        )
    if code in REFUSED or isinstance(exc, PermissionError):
        return error(
            f"The storage refused to let hookdump {what} `{url}` ({code or name}): the credentials are wrong"
            " or lack the permission.",
            "Check the credentials (AWS_PROFILE, ~/.aws, the environment) and the bucket's policy.",
        )
    if code in {"NoSuchBucket"} or "bucket does not exist" in str(exc).lower():
        return error(
            f"`{url}`: its bucket does not exist.", "Check the bucket's name, or create the bucket first."
        )
    if isinstance(exc, TypeError) and "keyword argument" in str(exc):
        return UsageError(
            f"The storage options given for `{url}` ({', '.join(sorted(_options)) or 'none'}) are not all"
            f" ones `{scheme(url)}://` takes: {exc}",
            "Check the --storage-option keys (the file system's own: anon, endpoint_url, profile, ...).",
        )
    if isinstance(exc, FileNotFoundError) or code in {"NoSuchKey", "404"}:
        return error(f"`{url}` does not exist.", "Check the URL (and the storage options' endpoint).")
    return error(f"Could not {what} `{url}`: {name}: {exc}", "Check the URL and the storage options.")


def _refusal(role: str) -> type[HookdumpError]:
    return UsageError if role == "out" else InputError


def _code(exc: BaseException) -> str:
    """The error code a storage service gave (botocore's ``response["Error"]["Code"]``), or ""."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""
