"""Whether timm's hub weights (``--pretrained``) can be fetched now: one quick connection to the hub (or the
proxy that reaches it); when there is none, huggingface_hub's offline mode, so the local cache answers at
once instead of 50 s of retries."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

#: Seconds to wait for the hub's (or proxy's) TCP handshake: a reachable one answers in well under a second.
CONNECT_TIMEOUT = 3.0
_found: dict[str, str] = {}  # the reason this process turned offline mode on


def offline_reason(timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why the hub cannot be reached (None when it can, or when HF_HUB_OFFLINE=1 says offline); with a
    reason, huggingface_hub is switched to offline mode for this process (its cache is still read), and
    later calls give the same reason without connecting again."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return _found.get("reason")
    proxy = next((os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy") if
                  os.environ.get(k)), None)  # fmt: skip
    url = urlsplit(proxy or constants.ENDPOINT)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    what = f"the proxy {host}:{port}" if proxy else f"the hub {constants.ENDPOINT}"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        reason = f"{what} cannot be reached ({getattr(exc, 'strerror', None) or exc or 'timed out'})"
    constants.HF_HUB_OFFLINE = True
    _found["reason"] = reason
    return reason
