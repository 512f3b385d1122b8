"""What reaches the disk and how it is read back, in two parts: :mod:`hookdump.store.folder`, what a
capture folder is (its layout, the manifest, the lock, the claims, the commit, the resume journal, the
inputs' table, the one reader), over :mod:`hookdump.store.formats`, how a tensor's bytes are laid out
(``.npy`` streams, ``.pt``, ``.safetensors``, ``tensors.zarr``, the streamed stats), which imports nothing of
the folder part.

Imports the ground, ``model`` (safe checkpoint loading) and ``inputs``. Imported by capture, pictures,
analysis, report, api and cli.
"""
