"""What reaches the disk and how it is read back: the writer (``sinks``) streaming ``.npy`` files
(``stream``, ``appendfile``), ``.pt`` / ``.safetensors`` (``formats``), the last move into ``OUT``
(``commit``), the folder and its lock (``outdir``, ``lock``), ``manifest.json`` (``manifest``), one captured
tensor's record (``records``), its numbers (``stats``), and the reader (``reader``: ``hookdump.open``;
``tensorfile`` for ``show``).

Imports the ground, ``model`` (safe checkpoint loading) and ``inputs``. Imported by capture, pictures,
report, api and cli.
"""
