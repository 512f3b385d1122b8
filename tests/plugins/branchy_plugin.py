"""A model whose forward depends on the input's values: it cannot be traced on meta, and its
`positive` branch runs for any non-zero input, while the traced all-zero input takes `other`."""

from timm.models import register_model
from torch import nn


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.positive = nn.Conv2d(4, 4, 1)
        self.other = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        x = self.stem(x).abs()
        return self.positive(x) if x.mean() > 0 else self.other(x)


@register_model
def branchy_net(pretrained=False, **kwargs):
    return Branchy()
