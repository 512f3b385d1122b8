"""A plugin written for an older timm: its builder takes no **kwargs, so timm's pretrained_cfg breaks it."""

from timm.models import register_model
from torch import nn


@register_model
def old_style_net(pretrained=False):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
