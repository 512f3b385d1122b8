"""A model whose middle layer gives NaN and Inf, registered with timm as a user's plugin would."""

import torch
from timm.models import register_model
from torch import nn


class Spoil(nn.Module):
    """Per image: the first row of channel 0 becomes +Inf, its last value -Inf, and 3 values of channel 1
    NaN; everything else passes through."""

    def forward(self, x):
        y = x.clone()
        y[:, 0, 0, :] = float("inf")
        y[:, 0, 0, -1] = float("-inf")
        y[:, 1, 0, :3] = float("nan")
        return y


class NonFinite(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.spoil = Spoil()
        self.act = nn.ReLU()
        self.head = nn.Linear(4, 10)

    def forward(self, x):
        y = self.act(self.spoil(self.conv(x)))
        return self.head(torch.nan_to_num(y, posinf=0.0, neginf=0.0).mean(dim=(2, 3)))


@register_model
def nonfinite_net(pretrained=False, **kwargs):
    return NonFinite()


class Scaled(nn.Module):
    """``conv``, then ``bad``: its input times ``factor`` (NaN, an infinity, or a number)."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3, padding=1)
        self.factor = factor
        self.bad = nn.Identity()

    def forward(self, x):
        return self.bad(self.conv(x) * self.factor)


@register_model
def nan_net(pretrained=False, **kwargs):
    return Scaled(float("nan"))


@register_model
def inf_net(pretrained=False, **kwargs):
    return Scaled(float("inf"))


@register_model
def neginf_net(pretrained=False, **kwargs):
    return Scaled(float("-inf"))


@register_model
def fine_net(pretrained=False, **kwargs):
    return Scaled(1.0)


@register_model
def double_net(pretrained=False, **kwargs):
    return Scaled(2.0)
