"""``hookdump report``: a static page of a finished capture (``build`` makes the folder, ``page`` its
HTML, ``tensors_page`` each tensor's section; ``analyses`` and ``analyses_page`` the sections of what
``compare`` and ``top`` left there). No torch.

Imports the ground, ``inputs``, ``store``, ``pictures`` and ``analysis``. Imported by api and cli.
"""
