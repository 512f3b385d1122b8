"""One capture: the run from its plan (``run``), hooks that copy what they see (``recorder``), batches
through the model (``runner``), pooling at hook time (``reduce``), shards and merge (``parallel``), sizes
known before the work (``budget``), its options, manifest header and results (``options``, ``header``,
``results``).

Imports the ground, ``model``, ``inputs`` and ``store``. Imported by api and cli.
"""
