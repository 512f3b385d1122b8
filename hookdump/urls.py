"""A place a URL names (``s3://bucket/key``, ``gs://``, ``hf://``, ``file://``, ``memory://``): its file
system through fsspec, with the storage options in force (``--storage-option KEY=VALUE``, a ``[storage]``
table in ``--config``, the API's ``storage_options=``; credentials from the usual places: the environment,
``~/.aws``), every call to it retried a bounded number of times when the network fails, each try one request,
and every way of not reaching it one paragraph naming the URL (``urlfailures.py``). A local path never comes
here: it keeps the local code path and its speed."""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .errors import HookdumpError, UsageError
from .urlfailures import error_for, refusal, transient

T = TypeVar("T")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
#: The package behind each scheme that fsspec does not carry itself, all in hookdump's ``cloud`` extra.
PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "hf": "huggingface_hub"}
EXTRA = "cloud"
ATTEMPTS_VAR = "HOOKDUMP_STORAGE_ATTEMPTS"  # tries of a call (default 5): then the network is down
#: On S3 each of hookdump's tries is one request: botocore's own retries (5 requests a call, counted) and
#: s3fs's (around them, for timeouts) would sit under them: a minute for "5 tries" when a server is down.
#: A retry setting of the user's for botocore is kept.
SINGLE = {"retries": {"total_max_attempts": 1}}
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
        raise error_for(role)(
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
            raise error_for(role)(
                f"`{url}` needs the `{package}` package, which is not installed ({exc}).",
                f"Install hookdump's {EXTRA} extra: pip install 'hookdump[{EXTRA}]'"
                f" (or pip install {package}).",
            ) from exc
    try:
        fs = _system(name)
    except (TypeError, ValueError) as exc:
        raise _bad_options(url, exc) from exc
    path = fs._strip_protocol(url)
    return fs, str(path)


def _system(name: str) -> Any:
    """One file system a scheme, storage options and credentials' environment (a server given by
    ``AWS_ENDPOINT_URL`` is read when the file system is made, so another one makes another)."""
    import fsspec  # for speed: only a URL needs it

    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_CREDENTIAL_ENV)))
    key = (name, repr(sorted(_options.items())), env)
    if key not in _systems:
        single = name in ("s3", "s3a") and not _user_retries(_options)
        options = dict(_options)
        if single:
            options["config_kwargs"] = {**(options.get("config_kwargs") or {}), **SINGLE}
        _systems[key] = fsspec.filesystem(name, skip_instance_cache=True, **options)
        if single:
            _systems[key].retries = 1  # s3fs's own loop, around botocore's
    return _systems[key]


def _user_retries(options: dict[str, Any]) -> bool:
    """Whether the user set botocore's retries (``config_kwargs={"retries": ...}``, ``AWS_MAX_ATTEMPTS``,
    ``AWS_RETRY_MODE``, ``max_attempts`` or ``retry_mode`` in the profile's ``~/.aws/config``): then they are
    kept, under each of hookdump's tries."""
    if "retries" in (options.get("config_kwargs") or {}):
        return True
    if os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE"):
        return True
    import botocore.exceptions  # for speed: only an s3:// URL needs it (s3fs imports it anyway)
    import botocore.session

    try:
        scoped = botocore.session.Session(profile=options.get("profile")).get_scoped_config()
    except botocore.exceptions.BotoCoreError:
        return False  # a profile that is not there: botocore says so, in the paragraph of the first call
    return "max_attempts" in scoped or "retry_mode" in scoped


def call(url: str, work: Callable[[], T], role: str = "input", what: str = "reach") -> T:
    """``work()`` on ``url``, tried again with a growing pause (0.5 s, 1, 2, 4) when the network fails,
    at most ``$HOOKDUMP_STORAGE_ATTEMPTS`` times (5); then, or at once for any other failure, the error
    paragraph naming the URL."""
    attempts = _attempts()
    for attempt in range(attempts):
        try:
            return work()
        except HookdumpError:
            raise
        except Exception as exc:  # the libraries behind fsspec raise many kinds
            if _options and isinstance(exc, TypeError) and "keyword argument" in str(exc):
                raise _bad_options(url, exc) from exc  # s3fs passes its options on at the first call
            if not transient(exc) or attempt == attempts - 1:
                raise refusal(url, exc, role, what, attempt + 1) from exc
            time.sleep(0.5 * 2**attempt * (0.75 + random.random() / 2))
    raise AssertionError("unreachable")


def _bad_options(url: str, exc: BaseException) -> UsageError:
    """The storage options in force are not all ones ``url``'s file system takes: their keys named (never
    their values: they may be credentials)."""
    return UsageError(
        f"The storage options given for `{url}` ({', '.join(sorted(_options)) or 'none'}) are not all ones"
        f" `{scheme(url)}://` takes: {exc}",
        "Check the --storage-option keys (the file system's own: anon, endpoint_url, profile, ...).",
    )


def _attempts() -> int:
    """``$HOOKDUMP_STORAGE_ATTEMPTS`` (5 when unset), read at each call; not a whole number >= 1: exit 2."""
    text = os.environ.get(ATTEMPTS_VAR) or "5"
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(
            f"{ATTEMPTS_VAR}={text} is not a number of tries.",
            "Set it to a whole number >= 1, or unset it (5).",
        )
    return int(text)
