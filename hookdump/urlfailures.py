"""Every way a call to the storage behind a URL fails, as hookdump says it: which failures are the
network's (the server down, slow or busy: tried again, then exit 5 and resumable) and each failure one
paragraph naming the URL (no credentials, credentials refused, a bucket or object that is not there), never
an option's value."""

from __future__ import annotations

from .errors import HookdumpError, InputError, StorageError, UsageError

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
        "HTTPClientError",
        "IncompleteRead",
        "ClientPayloadError",
        "FSTimeoutError",
    ]
)
BUSY = frozenset(
    [
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "500",
        "502",
        "503",
        "504",
    ]
)
NO_CREDENTIALS = frozenset(["NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"])
REFUSED = frozenset(
    ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "InvalidToken", "ExpiredToken"]
)


def transient(exc: BaseException) -> bool:
    """Whether a failure is the network's (the server down or slow, a dropped connection, throttling):
    worth trying again, and the run resumable once it is back."""
    return type(exc).__name__ in NETWORK or _code(exc) in BUSY


def refusal(url: str, exc: BaseException, role: str, what: str, attempts: int = 1) -> HookdumpError:
    """One paragraph for a failure to ``what`` (reach, read, write, list) ``url``: the network down (exit 5,
    resumable), no credentials, credentials refused, a bucket or object that is not there."""
    name, code = type(exc).__name__, _code(exc)
    if transient(exc):
        return StorageError(
            f"Could not {what} `{url}`: the storage did not answer after {attempts}"
            f" {'try' if attempts == 1 else 'tries'} ({code or name}).",
            "Check the network and the endpoint (AWS_ENDPOINT_URL, --storage-option endpoint_url=...), then"
            " rerun the same command (a capture: with --resume; what was committed is kept).",
        )
    error = error_for(role)
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
    if isinstance(exc, FileNotFoundError) or code in {"NoSuchKey", "404"}:
        return error(f"`{url}` does not exist.", "Check the URL (and the storage options' endpoint).")
    return error(f"Could not {what} `{url}`: {name}: {exc}", "Check the URL and the storage options.")


def error_for(role: str) -> type[HookdumpError]:
    return UsageError if role == "out" else InputError


def _code(exc: BaseException) -> str:
    """The error code a storage service gave (botocore's ``response["Error"]["Code"]``, also under the
    ``OSError`` s3fs turns it into: its cause), or ""."""
    for each in (exc, exc.__cause__):
        response = getattr(each, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code", ""))
    return ""
