"""The inputs: where the images come from (``spec``); paths, folders (``walk``), globs and ``@list.txt`` to
the checked list of inputs (``files``); one input to pixels (``images``: opened by ``opening``, decoded by
``pixels``); the model's eval transform (``transforms``); batches decoded in worker processes (``loader``);
the inputs' records (``records``).

Imports the ground and ``model`` (a model name given where an image was meant). Imported by store, capture,
pictures, report, api and cli.
"""
