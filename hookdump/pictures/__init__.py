"""Captured tensors as PNGs for ``show`` and ``capture --png`` (``draw``; each kind of picture: ``kinds``;
the PNGs written all or nothing: ``pngs``): what to draw (``style``), maps of one image (``maps``,
``windows``), channel grids (``grid``, ``colormap``), heat maps over the photo (``overlay``), Grad-CAM
(``gradcam``), attention maps and rollout (``attnmaps``, ``attnviz``). No torch.

Imports the ground, ``inputs`` (the photo as the model saw it) and ``store``. Imported by report, api and cli.
"""
