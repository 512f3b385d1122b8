"""The recorder on its own: hooks always removed, calls counted, structured outputs walked."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

from hookdump.capture.recorder import Recorder
from hookdump.errors import LayerError
from hookdump.model.layers import LayerTarget


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_every_hook_is_removed_even_when_forward_fails() -> None:
    model = timm.create_model("test_vit").eval()
    recorder = Recorder(model, [LayerTarget("blocks.0.attn"), LayerTarget("head")], what="both")
    with pytest.raises(AssertionError, match="divisible by patch size"), recorder:
        assert _hook_count(model) == 4
        recorder.run(torch.zeros(1, 3, 7, 7), "test_vit")  # wrong size: patch embedding fails
    assert _hook_count(model) == 0


def test_call_past_the_last_is_a_layer_error() -> None:
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    with Recorder(model, [LayerTarget("0", 2)]) as recorder, pytest.raises(LayerError, match="runs 2 time"):
        recorder.run(torch.ones(1, 4), "tiny")
    assert _hook_count(model) == 0


def test_reused_module_gets_one_tensor_per_call_and_tuple_elements() -> None:
    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
            return x * 2, (3, 4)

    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    with Recorder(model, [LayerTarget("0")], what="both") as recorder:
        recorder.run(torch.ones(2, 4), "tiny")
    stems = sorted(c.stem for c in recorder.entries())
    assert stems == ["0@0", "0@0.in0", "0@1", "0@1.in0"]
    pair = nn.Sequential(nn.Identity(), Pair())
    with Recorder(pair, [LayerTarget("1")]) as recorder:
        recorder.run(torch.ones(2, 4), "pair")
    assert [c.stem for c in recorder.entries()] == ["1.out0"]
    assert list(recorder.other.values()) == ["(3, 4)"]
