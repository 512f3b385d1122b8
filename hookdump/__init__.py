"""hookdump: capture what any layer of a timm vision model sees, and know why a hook would not fire."""

__version__ = "0.1.0"
