"""How a captured tensor's bytes are laid out on disk and read back, knowing nothing of a capture folder.

Public surface, a module each: ``choices`` (``--format`` and ``--save-dtype`` checked, a tensor as saved),
``npystream`` (``NpyStream``: a ``.npy`` written batch by batch over ``appendfile``'s ``AppendFile``, past
the page cache), ``npy`` (a finished ``.npy`` read as bytes; bfloat16 bits widened), ``pt`` and
``safetensors`` (each written from the ``.npy`` streams a few MB at a time, and read back memory-mapped),
``zarr`` (``tensors.zarr``, a Zarr v3 group written from the streams a few chunks at a time, read lazily),
``stats`` (each tensor's min, max, mean, std, zeros, NaN, Inf, streamed exactly) and ``nonfinite`` (one
policy for NaN and Inf in every reader).

Imports the ground and ``model`` (``pt``'s safe loading), never :mod:`hookdump.store.folder`. Nothing is
imported here, so a reader takes only the formats it needs (``.npy`` and ``.safetensors`` need no torch).
"""
