"""The command line's fixtures that more than one of its test files uses."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KB file system (tmpfs); skipped where mounting is not allowed (not root, a container)."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        unmounted = subprocess.run(["umount", str(where)], capture_output=True)
        if unmounted.returncode != 0:  # busy: hookdump left a file open on it
            subprocess.run(["umount", "--lazy", str(where)], check=False)
            pytest.fail(f"cannot unmount the small disk: {unmounted.stderr.decode().strip()}")
