"""The model: names, aliases and plugins to an ``nn.Module`` (``build``, ``plugins``, ``args``,
``checkpoints``, ``hub``, ``meta``), what fires inside it (``inventory``, ``outputs``), layer specs to modules
(``layers``, ``featlevels``, ``featrules``), where a map keeps its channels (``layouts``), and the attention
switch (``attention``).

Imports only the ground (``errors``, ``units``, ``digest``, ``failures``, ``version``). Imported by inputs,
store, capture, api and cli.
"""
