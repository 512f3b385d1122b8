"""The command line: the Typer app (``app``), its shell (error paragraphs, exit codes, ``--config`` and
``--json``), what reaches the terminal (``render``; the module tree: ``tree_view``; what a command wrote:
``summaries``; ``progress``), config files (``config``), and the console script's own process settings
(``process``).

May import every wing; nothing imports it. ``app`` imports no torch at module level, so ``--help`` is instant.
"""
