"""The inputs: paths, folders, globs and ``@list.txt`` to image files and the model's eval transform
(``files``), one image file to pixels (``images``), batches decoded in worker processes (``loader``).

Imports the ground and ``model`` (a model name given where an image was meant). Imported by store, capture,
pictures, report, api and cli.
"""
