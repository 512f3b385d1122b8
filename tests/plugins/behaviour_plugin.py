"""Models that behave like real user code does at the edges: slow, chatty, or watched while being built."""

import os
import time
from pathlib import Path

from timm.models import register_model
from torch import nn


class Small(nn.Module):
    """conv -> relu -> pool -> fc; forward optionally sleeps and prints, as user code may."""

    def __init__(self, sleep: float = 0.0, chatty: bool = False) -> None:
        super().__init__()
        self.sleep, self.chatty = sleep, chatty
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if self.chatty:
            print("forward of chatty_net")
        if self.sleep and x.device.type != "meta":
            time.sleep(self.sleep)
        return self.fc(self.pool(self.act(self.conv(x))).flatten(1))


@register_model
def slow_net(pretrained=False, **kwargs):
    """Each real forward takes HOOKDUMP_TEST_SLEEP seconds (default 0.5): time to signal a running capture."""
    return Small(sleep=float(os.environ.get("HOOKDUMP_TEST_SLEEP", "0.5")))


@register_model
def chatty_net(pretrained=False, **kwargs):
    print("building chatty_net")
    return Small(chatty=True)


@register_model
def watched_net(pretrained=False, **kwargs):
    """Appends a line to $HOOKDUMP_TEST_BUILDS each time it is built with real weights (not on meta)."""
    model = Small()
    if model.conv.weight.device.type != "meta" and os.environ.get("HOOKDUMP_TEST_BUILDS"):
        with Path(os.environ["HOOKDUMP_TEST_BUILDS"]).open("a") as log:
            log.write("built\n")
    return model
