"""Small hand-written models for the odd cases of hooking, registered with timm as a user's plugin would."""

from collections import namedtuple
from dataclasses import dataclass

import torch
from timm.models import register_model
from torch import nn

Pair = namedtuple("Pair", ["low", "high"])


@dataclass
class Heads:
    logits: torch.Tensor
    scale: float


class Split(nn.Module):
    """Returns a dict whose values are a tensor, a namedtuple of tensors and a plain int."""

    def forward(self, x):
        return {"mean": x.mean(dim=1), "parts": Pair(x.clamp(max=0), x.clamp(min=0)), "channels": x.shape[1]}


class Gate(nn.Module):
    """Takes a keyword tensor."""

    def forward(self, x, *, scale):
        return x * scale


class DataclassHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return Heads(self.fc(x), 2.0)


class Odd(nn.Module):
    """conv -> shared act (called 3 times) -> in-place add after `conv` -> split (dict) -> gate (kwargs)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()  # reused: called three times per forward
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.split = Split()
        self.gate = Gate()
        self.scale = nn.Parameter(torch.full((1, 8), 0.5))
        self.head = DataclassHead()
        self.unused = nn.Linear(2, 2)

    def forward(self, x):
        y = self.conv(x)
        y += 1.0  # in place, right after the hook on `conv` ran
        y = self.act(y)
        y = self.act(self.conv2(y)) + self.act(-y)
        pooled = self.split(y)["mean"].mean(dim=(1, 2))
        pooled = self.gate(pooled.unsqueeze(1).expand(-1, 8), scale=self.scale)
        return self.head(pooled).logits


@register_model
def odd_net(pretrained=False, **kwargs):
    return Odd()


@register_model
def scripted_net(pretrained=False, **kwargs):
    return torch.jit.script(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))


@register_model
def compiled_net(pretrained=False, **kwargs):
    return torch.compile(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))


class Forgiving(nn.Module):
    """Model code with a broad `except Exception` fallback around a block, as some real models have."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.fallback = nn.Conv2d(3, 4, 1)
        self.head = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        try:
            y = self.block(x)
        except Exception:
            y = self.fallback(x)
        return self.head(y)


@register_model
def forgiving_net(pretrained=False, **kwargs):
    return Forgiving()


class Fragile(nn.Module):
    """Runs on the all-zero traced input, raises on any real one: a bug in the model, not the user's."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)

    def forward(self, x):
        if x.abs().sum() > 0:
            raise RuntimeError("this model is broken")
        return self.conv(x)


@register_model
def fragile_net(pretrained=False, **kwargs):
    return Fragile()
