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


class _Tricky(nn.Module):
    """``a``'s output is changed in place after its hook from the third pass on (so the recorder, which
    copies a tensor at hook time only until a pass has shown it untouched, must notice and run that batch
    again); ``b``'s output is kept by the model and changed in place during the next pass (a tensor that
    something else shares, which the recorder must copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.passes = 0
        self.held: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.passes += 1
        if self.held is not None:
            self.held.mul_(-1.0)  # the last pass's `b` output, changed now
        y = self.a(x)
        out = self.b(x)
        self.held = out
        if self.passes >= 3:
            y.add_(100.0)
        return y + out


def test_tensors_kept_by_reference_equal_copies_made_at_hook_time() -> None:
    """The recorder keeps a tensor by reference only where its version counter proves that nothing
    changed it after its hook, and nothing else holds it: its values equal a clone made in the hook."""
    torch.manual_seed(0)
    model = _Tricky().eval()
    cloned: dict[str, list[torch.Tensor]] = {"a": [], "b": []}
    for name in cloned:
        getattr(model, name).register_forward_hook(lambda m, i, o, n=name: cloned[n].append(o.clone()))
    kept: dict[str, list[torch.Tensor]] = {"a": [], "b": []}
    inputs = [torch.randn(2, 4) for _ in range(4)]
    with Recorder(model, [LayerTarget("a"), LayerTarget("b")]) as recorder, torch.no_grad():
        for x in inputs:
            recorder.run(x, "tricky")
            for (layer, *_), tensor in recorder.drain().items():
                kept[layer].append(tensor)
    # the third batch ran twice (its `a` was changed after the hook): the second run's clones count
    del cloned["a"][2], cloned["b"][2]
    for name in kept:
        assert len(kept[name]) == len(inputs) == len(cloned[name])
        for mine, theirs in zip(kept[name], cloned[name], strict=True):
            assert torch.equal(mine, theirs)
    assert ("a", "output", None, 0) in recorder.modified
