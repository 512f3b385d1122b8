"""A model that cannot run on the meta device (it reads a value), and that counts how often it is built."""

from timm.models import register_model
from torch import nn

BUILDS = []


class ReadsAValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.spare = nn.Linear(4, 4)  # never called
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = self.conv(x)
        if x.mean().item() > 1e9:  # data-dependent: there is no value on meta
            x = x * 2
        return self.head(x.mean((2, 3)))


@register_model
def reads_a_value(pretrained=False, **kwargs):
    import torch

    BUILDS.append("meta" if torch.empty(0).is_meta else "real")
    return ReadsAValue()


@register_model
def counted_lenet(pretrained=False, **kwargs):
    import torch

    BUILDS.append("meta" if torch.empty(0).is_meta else "real")
    return nn.Sequential(
        nn.Conv2d(3, 6, 5), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3)
    )
