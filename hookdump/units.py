"""Sizes as people write and read them: ``2GB`` in, ``1.2 MB`` out; long lists shortened for messages."""

from __future__ import annotations

import os
import re

from .errors import UsageError


def first_few(items: list[str], n: int = 3) -> str:
    """``a, b, c, ...``: the first ``n`` of ``items``, an ellipsis when there are more."""
    return ", ".join(items[:n]) + (", ..." if len(items) > n else "")


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}


def parse_size(text: str, option: str = "--shard-size") -> int:
    """``2GB`` / ``500MB`` / ``1.5GiB`` / ``1000000`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match[2].upper() if match else ""
    if not match or unit not in _UNITS or float(match[1]) <= 0:
        raise UsageError(f"{option} `{text}` is not a size.", f"Write it like {option} 2GB (or 500MB).")
    return int(float(match[1]) * _UNITS[unit])


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB'."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def available_memory() -> int:
    """Bytes of memory free for this process now (MemAvailable on Linux, else the free pages)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62
