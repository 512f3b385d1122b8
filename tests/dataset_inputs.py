"""What the tests of dataset inputs share (tar shards, Parquet tables, datasets folders): the six photos
they are built from, the capture they are compared by, the console script run in a folder."""

from __future__ import annotations

from pathlib import Path

import forkrun

PHOTOS = ["chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg", "coins.png", "camera.png"]
MODEL = ("-m", "test_resnet", "-l", "layer1", "--seed", "2")


def hd(
    cwd: Path, *args: object, env: dict[str, str] | None = None
) -> forkrun.subprocess.CompletedProcess[str]:
    """``hookdump ARGS`` in ``cwd`` (forked: see forkrun)."""
    return forkrun.run(args, cwd=cwd, env=env)
