"""The rendered tree, pinned: plain text (stdout is not a terminal), so no colour and no wrapping.

Regenerate after an intended change with ``HOOKDUMP_UPDATE_GOLDEN=1 .venv/bin/python -m pytest
tests/cli/test_golden.py``, then read the diff: every shape, parameter count and mark was checked by hand
against the model's definition when the files were first written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"

CASES = {
    "test_resnet_64.txt": ["test_resnet", "--input-size", "3,64,64"],
    "test_vit.txt": ["test_vit"],
    "test_vit_filter_attn.txt": ["test_vit", "--filter", "blocks.*.attn.*", "--leaves"],
    "test_vit_depth2.txt": ["test_vit", "--depth", "2"],
}


@pytest.mark.parametrize("golden", sorted(CASES))
def test_rendered_tree_matches_golden(cli, golden: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    result = cli("list-modules", *CASES[golden])
    assert result.exit_code == 0, result.stderr
    path = GOLDEN / golden
    if os.environ.get("HOOKDUMP_UPDATE_GOLDEN"):
        path.write_text(result.stdout)
    assert result.stdout == path.read_text()
