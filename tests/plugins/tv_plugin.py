"""torchvision's ResNet-18 registered with timm, so hookdump can be checked against torchvision's own
feature extractor."""

import torchvision
from timm.models import register_model


@register_model
def tv_resnet18(pretrained=False, **kwargs):
    return torchvision.models.resnet18(weights=None)
