"""hookdump's version, at the ground: the manifest, the report page and ``--version`` all print it."""

__version__ = "0.1.0"
