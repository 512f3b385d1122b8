"""Shared fixtures: real photos from the scikit-image wheel, the plugin folder, a CLI runner."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import skimage
from typer.testing import CliRunner

from hookdump.cli import app

SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture(scope="session")
def chelsea() -> Path:
    """A real photo of a tabby cat (public domain, scikit-image)."""
    return SKIMAGE_DATA / "chelsea.png"


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    """A folder of three real photos, one of them in a sub-folder."""
    folder = tmp_path / "photos"
    (folder / "more").mkdir(parents=True)
    shutil.copy(SKIMAGE_DATA / "chelsea.png", folder / "chelsea.png")
    shutil.copy(SKIMAGE_DATA / "coffee.png", folder / "coffee.png")
    shutil.copy(SKIMAGE_DATA / "astronaut.png", folder / "more" / "astronaut.png")
    return folder


@pytest.fixture(scope="session")
def plugins() -> Path:
    return PLUGINS


class Cli:
    """Runs the real Typer app in-process; stdout and stderr kept apart."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str | Path) -> object:
        return self.runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def cli() -> Cli:
    return Cli()
