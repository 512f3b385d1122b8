"""hookdump's saved arrays against independent oracles, on seeded weights: (a) a hand-written
register_forward_hook + clone, (b) timm's forward_intermediates(), (c) torchvision's
create_feature_extractor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import hand_hooks, photo_batch, seeded
from safetensors.torch import save_file
from torchvision.models.feature_extraction import create_feature_extractor

from hookdump import api
from hookdump.inputs.spec import InputSpec

Adapt = Callable[[torch.Tensor], torch.Tensor]


def _nlc_to_nchw(prefix: int) -> Adapt:
    def adapt(t: torch.Tensor) -> torch.Tensor:
        t = t[:, prefix:, :]
        side = int(t.shape[1] ** 0.5)
        return t.reshape(t.shape[0], side, side, -1).permute(0, 3, 1, 2)

    return adapt


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


# name, input side, the modules whose outputs timm's forward_intermediates returns, how to compare
CASES = [
    ("resnet18", 224, ["act1", "layer1", "layer2", "layer3", "layer4"], _same),
    ("vit_tiny_patch16_224", 224, [f"blocks.{i}" for i in range(12)], _nlc_to_nchw(1)),
    ("swin_tiny_patch4_window7_224", 224, ["layers.0", "layers.1", "layers.2", "layers.3"], _nhwc),
    ("convnext_atto", 96, ["stages.0", "stages.1", "stages.2", "stages.3"], _same),
    ("twins_svt_small", 96, ["blocks.0.1", "blocks.1.1", "blocks.2.9"], _nlc_to_nchw(0)),
    ("efficientnet_b0", 96, ["blocks.0", "blocks.1", "blocks.2", "blocks.4", "blocks.6"], _same),
]


@pytest.mark.parametrize(("name", "side", "names", "adapt"), CASES, ids=[c[0] for c in CASES])
def test_against_hand_hooks_and_forward_intermediates(
    name: str, side: int, names: list[str], adapt: Adapt, tmp_path: Path, chelsea: Path
) -> None:
    model, checkpoint = seeded(name, tmp_path, seed=1234)
    for module in model.modules():  # non-trivial batch-norm statistics, so eval mode matters
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 1.5)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(checkpoint))
    spec = api.ModelSpec(name, checkpoint=checkpoint)
    if side == 224:  # a real photo through the model's own eval transform
        result = api.capture([str(chelsea)], names, model=spec, out=tmp_path / "out")
        x = photo_batch(model, chelsea)
    else:
        source = InputSpec(random=True, seed=5, input_size=(3, side, side))
        result = api.capture(source, names, model=spec, out=tmp_path / "out")
        x = torch.randn((1, 3, side, side), generator=torch.Generator().manual_seed(5))
    saved = {n: torch.from_numpy(np.load(result.out / f"{n}.npy")) for n in names}

    hand, _ = hand_hooks(model, names, x)
    with torch.no_grad():
        intermediates = model.forward_intermediates(x, intermediates_only=True)
    diffs = []
    for n in names:
        assert saved[n].shape == hand[n].shape
        torch.testing.assert_close(saved[n], hand[n], atol=1e-6, rtol=0)
        diffs.append(float((saved[n] - hand[n]).abs().max()))
    for n, oracle in zip(names, intermediates[: len(names)], strict=True):
        torch.testing.assert_close(adapt(saved[n]), oracle, atol=1e-6, rtol=0)
        diffs.append(float((adapt(saved[n]) - oracle).abs().max()))
    print(f"{name}: {len(names)} layers, max |diff| {max(diffs):.2e}")


@pytest.mark.filterwarnings("ignore:Overwriting tv_resnet18")
def test_against_torchvision_feature_extractor(plugins: Path, tmp_path: Path) -> None:
    """torchvision names the second call of a reused module `relu_1`: hookdump writes `relu@1`."""
    import sys

    torch.manual_seed(99)
    sys.path.insert(0, str(plugins))
    try:
        import tv_plugin
    finally:
        sys.path.pop(0)
    model = tv_plugin.tv_resnet18().eval()
    checkpoint = tmp_path / "tv.safetensors"
    save_file(model.state_dict(), str(checkpoint))
    layers = ["layer1.0.relu", "layer2", "layer3.1.bn2", "avgpool", "fc"]
    spec = api.ModelSpec("tv_resnet18", imports=(str(plugins / "tv_plugin.py"),), checkpoint=checkpoint)
    source = InputSpec(random=True, seed=2, input_size=(3, 128, 128))
    result = api.capture(source, layers, model=spec, out=tmp_path / "out")

    nodes = ["layer1.0.relu", "layer1.0.relu_1", "layer2", "layer3.1.bn2", "avgpool", "fc"]
    extractor = create_feature_extractor(model, return_nodes=nodes)
    x = torch.randn((1, 3, 128, 128), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = extractor(x)
    files = {
        "layer1.0.relu": "layer1.0.relu@0",
        "layer1.0.relu_1": "layer1.0.relu@1",
        "layer2": "layer2",
        "layer3.1.bn2": "layer3.1.bn2",
        "avgpool": "avgpool",
        "fc": "fc",
    }
    for node, stem in files.items():
        got = torch.from_numpy(np.load(result.out / f"{stem}.npy"))
        torch.testing.assert_close(got, expected[node], atol=1e-6, rtol=0)
    assert any("layer1.0.relu runs 2 times" in note for note in result.notes)
