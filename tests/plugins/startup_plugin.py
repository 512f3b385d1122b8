"""Models for building with a checkpoint (weight init skipped) and for refused wrappers, as plugins."""

import torch
from timm.layers import trunc_normal_
from timm.models import register_model
from torch import nn

BUILDS = []  # the name of each model whose __init__ finished, once per build


class InitProbe(nn.Module):
    """Weight init by every route (init functions, `.data`, views, reset_parameters) next to non-persistent
    buffers computed with in-place ops, which must survive a build that skips the init."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(3), persistent=False)
        self.steps.uniform_(0, 1)  # random, drawn before any weight init: the same stream either way
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)
        self.scale = nn.Parameter(torch.empty(4))
        table = torch.arange(16.0).reshape(4, 4)
        table.mul_(2).add_(1)
        table[0].fill_(-1.0)
        self.register_buffer("table", table, persistent=False)
        self.table.sub_(0.5)
        self.apply(self._init_weights)

    def _init_weights(self, m: nn.Module) -> None:
        if isinstance(m, nn.Conv2d):
            m.weight.data.normal_(0, 0.1)
            m.bias.data.zero_()
        elif isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=0.02)  # timm's: in-place ops on the parameter
            nn.init.xavier_uniform_(m.weight)  # torch.nn.init without a torch-function check of its own
            with torch.no_grad():
                m.bias[:2].fill_(0.5)
        elif isinstance(m, InitProbe):
            nn.init.constant_(m.scale, 2.0)

    def forward(self, x):
        y = self.norm(self.conv(x)) * self.scale[None, :, None, None]
        y = y.mean(dim=(2, 3)) @ self.table
        return self.fc(y + self.steps.sum())


@register_model
def init_probe_net(pretrained=False, **kwargs):
    return InitProbe()


class InitReader(nn.Module):
    """Reads its initial values in __init__ and refuses to be built without them."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.zeros(1))
        nn.init.ones_(self.gain)
        if self.gain.item() != 1.0:
            raise RuntimeError("built without its init")
        self.fc = nn.Linear(3, 2)
        BUILDS.append("init_reader_net")

    def forward(self, x):
        return self.fc(x.mean(dim=(2, 3))) * self.gain


@register_model
def init_reader_net(pretrained=False, **kwargs):
    return InitReader()


class HiddenParam(nn.Module):
    """A parameter left out of its state dict (saved and loaded without it): its value is its seeded init."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.hidden = nn.Parameter(torch.empty(2))
        nn.init.normal_(self.hidden)
        BUILDS.append("hidden_param_net")

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        del destination[prefix + "hidden"]

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)
        missing.remove(prefix + "hidden")

    def forward(self, x):
        return self.fc(x.mean(dim=(2, 3))) + self.hidden


@register_model
def hidden_param_net(pretrained=False, **kwargs):
    return HiddenParam()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x)


@register_model
def dp_net(pretrained=False, **kwargs):
    return nn.DataParallel(Net())
