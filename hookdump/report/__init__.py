"""``hookdump report``: a static page of a finished capture (``build`` makes the folder, ``page`` its
HTML). No torch.

Imports the ground, ``inputs``, ``store`` and ``pictures``. Imported by api and cli.
"""
