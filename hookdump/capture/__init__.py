"""One capture: its launch in one process or on torchrun's ranks (``launch``), the preflight that plans it
(``preflight``, ``build``), the run from its plan (``prepare`` sets it up, ``run`` executes it), hooks that
copy what they see (``recorder`` made of ``hooks`` and ``copies``), batches through the model (``runner``),
pooling at hook time (``reduce``), shards and merge (``parallel``), sizes known before the work
(``budget``), the module tree (``listing``), its options, manifest header and results (``options``,
``header``, ``results``).

Imports the ground, ``model``, ``inputs`` and ``store``. Imported by api and cli.
"""
