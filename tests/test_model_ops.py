"""Issue 37, its first part: the values a module computes in its own forward, named ``PATH:OP`` and found by
``list-modules --ops`` on the meta device. Names are checked against forward code written here, and the names
found on meta against those seen on real runs of the same models at batch sizes 1 and 7."""

from __future__ import annotations

import json
from pathlib import Path

import forkrun
import pytest
import timm
import torch
import torch.nn.functional as F
from torch import nn

from hookdump.model.ops import OpInfo, discover, op_name


class Spelled(nn.Module):
    """The same add written five ways, and a few ops that are not adds, in the root's own forward; a child
    whose ops are its own."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        a = x + y
        b = x.add(y)
        c = torch.add(x, y)
        d = a.clone()
        d += b
        e = 1 - c
        _ = x.shape[0]  # no tensor: no name
        return F.gelu(d * e).flatten(1).T


def _names(found: dict[str, list[OpInfo]], path: str) -> list[str]:
    return [op.op for op in found.get(path, [])]


def test_every_spelling_of_an_op_has_its_name_in_run_order() -> None:
    net = Spelled().eval()
    found = discover(net, lambda: net(torch.zeros(2, 4)))
    assert _names(found, "") == [
        "add",
        "add_1",
        "add_2",
        "clone",
        "add_3",
        "sub",
        "mul",
        "gelu",
        "flatten",
        "T",
    ]
    assert _names(found, "fc") == ["linear"]  # the child's op is the child's, not the root's
    inplace = {op.op: op.inplace for op in found[""]}
    assert inplace["add_3"] and not inplace["add"]
    assert all(op.name == f":{op.op}" for op in found[""]) and found["fc"][0].name == "fc:linear"
    assert found[""][-1].shapes == [[4, 2]] and found[""][0].shapes == [[2, 4]]


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (torch.Tensor.add, ("add", False)), (torch.add, ("add", False)),
        (torch.Tensor.__add__, ("add", False)), (torch.Tensor.__radd__, ("add", False)),
        (torch.Tensor.__iadd__, ("add", True)),
        (torch.Tensor.add_, ("add", True)), (torch.Tensor.__rsub__, ("sub", False)),
        (torch.Tensor.__truediv__, ("div", False)), (torch.Tensor.__matmul__, ("matmul", False)),
        (torch.Tensor.__getitem__, ("getitem", False)), (F.gelu, ("gelu", False)),
        (torch.cat, ("cat", False)),
    ],
)  # fmt: skip
def test_op_names_fold_operators_and_in_place_forms(func: object, expected: tuple[str, bool]) -> None:
    assert op_name(func) == expected  # type: ignore[arg-type]


MODELS = ["test_vit", "test_resnet", "test_convnext", "test_efficientnet", "twins_svt_small", "resnet18"]


@pytest.mark.parametrize("name", MODELS)
def test_names_found_on_meta_are_the_names_of_real_runs(name: str) -> None:
    """The same names, in the same order, with the same shapes but for the batch, on the meta device and in
    real forward passes of batch 1 and 7 (seeded weights, eval mode)."""
    size = (3, 64, 64) if name != "twins_svt_small" else (3, 96, 96)
    with torch.device("meta"):
        meta = timm.create_model(name).eval()
    on_meta = discover(meta, lambda: meta(torch.zeros(1, *size, device="meta")))
    torch.manual_seed(0)
    real = timm.create_model(name).eval()
    for batch in (1, 7):
        with torch.no_grad():
            seen = discover(real, lambda batch=batch: real(torch.randn(batch, *size)))
        assert {p: _names(seen, p) for p in seen} == {p: _names(on_meta, p) for p in on_meta}
        for path, ops in seen.items():
            for op, planned in zip(ops, on_meta[path], strict=True):  # a dim is the same, or batch times it
                pairs = list(zip(op.shapes, planned.shapes, strict=True))
                assert all(
                    len(r) == len(m) and all(a in (b, b * batch) for a, b in zip(r, m, strict=True))
                    for r, m in pairs
                ), (path, op.op, op.shapes, planned.shapes)
    assert sum(len(ops) for ops in on_meta.values()) > 10


def test_list_modules_ops_shows_a_vit_blocks_residual_adds(tmp_path: Path) -> None:
    """The console script: ``--ops`` puts each module's own ops under it, ``--json`` lists them per module."""
    done = forkrun.run(
        ["list-modules", "vit_tiny_patch16_224", "--ops", "--filter", "blocks.3"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    block = next(i for i, line in enumerate(lines) if line.endswith("feat:3") and "blocks.3  Block" in line)
    assert "blocks.3:add  op  -> (1, 197, 192)" in lines[block + 1]
    assert "blocks.3:add_1  op  -> (1, 197, 192)" in lines[block + 2]
    assert any("blocks.3.attn:scaled_dot_product_attention  op" in line for line in lines)
    done = forkrun.run(["list-modules", "vit_tiny_patch16_224", "--ops", "--json"], cwd=tmp_path)
    modules = {m["name"]: m for m in json.loads(done.stdout)}
    ops = modules["blocks.3"]["ops"]
    assert [(o["name"], o["op"], o["module"], o["shapes"], o["calls"]) for o in ops] == [
        ("blocks.3:add", "add", "blocks.3", [[1, 197, 192]], 1),
        ("blocks.3:add_1", "add_1", "blocks.3", [[1, 197, 192]], 1),
    ]
    assert modules[""]["ops"] and all(o["name"].startswith(":") for o in modules[""]["ops"])  # the root's own
    plain = forkrun.run(["list-modules", "vit_tiny_patch16_224", "--json"], cwd=tmp_path)
    assert "ops" not in json.loads(plain.stdout)[0]  # only when asked: the trace is the same
    ignored = forkrun.run(["list-modules", "test_resnet", "--ops", "--no-shapes"], cwd=tmp_path)
    assert ignored.returncode == 0 and "note: --ops is ignored with --no-shapes" in ignored.stderr
