"""Issue 37, its first part: the values a module computes in its own forward, named ``PATH:OP`` and found by
``list-modules --ops`` on the meta device. Names are checked against forward code written here, and the names
found on meta against those seen on real runs of the same models at batch sizes 1 and 7."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import forkrun
import pytest
import timm
import torch
import torch.nn.functional as F
from torch import nn

from hookdump.model.opinfo import OpInfo, discover
from hookdump.model.ops import op_name


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


# 24 timm architectures of many families: (name, create_model keywords, input side)
MODELS = [
    ("test_vit", {}, 64),
    ("deit_tiny_distilled_patch16_224", {"img_size": 64}, 64),
    ("xcit_nano_12_p16_224", {"img_size": 64}, 64),
    ("swin_tiny_patch4_window7_224", {"img_size": 64, "window_size": 4}, 64),
    ("test_convnext", {}, 64),
    ("convnext_atto", {}, 64),
    ("twins_svt_small", {}, 96),
    ("twins_pcpvt_small", {}, 96),
    ("test_resnet", {}, 64),
    ("resnet18", {}, 64),
    ("test_efficientnet", {}, 64),
    ("efficientnet_b0", {}, 64),
    ("coat_lite_tiny", {"img_size": 64}, 64),
    ("mvitv2_tiny", {"img_size": 64}, 64),
    ("mobilenetv3_small_050", {}, 64),
    ("regnetx_002", {}, 64),
    ("pvt_v2_b0", {}, 64),
    ("caformer_s18", {}, 64),
    ("edgenext_xx_small", {}, 64),
    ("test_nfnet", {}, 64),
    ("test_byobnet", {}, 64),
    ("test_mambaout", {}, 64),
    ("levit_128s", {"img_size": 64}, 64),
    ("test_maxvit", {}, 160),
]


def _same_names(on_meta: dict[str, list[OpInfo]], seen: dict[str, list[OpInfo]], batch: int) -> None:
    """The same names, in the same order, with the same shapes but for the batch."""
    assert {p: _names(seen, p) for p in seen} == {p: _names(on_meta, p) for p in on_meta}
    for path, ops in seen.items():
        for op, planned in zip(ops, on_meta[path], strict=True):  # a dim is the same, or batch times it
            pairs = list(zip(op.shapes, planned.shapes, strict=True))
            assert all(
                len(r) == len(m) and all(a in (b, b * batch) for a, b in zip(r, m, strict=True))
                for r, m in pairs
            ), (path, op.op, op.shapes, planned.shapes)


@pytest.mark.parametrize(("name", "options", "side"), MODELS, ids=[m[0] for m in MODELS])
def test_names_found_on_meta_are_the_names_of_real_runs(
    name: str, options: dict[str, Any], side: int
) -> None:
    """On the meta device and in the first real forward pass of batch 1 and of batch 7 (seeded weights, eval
    mode; a new model each time: LeViT fills a cache in its first pass, which the capture refuses to name
    across, see test_capture_ops_flow)."""
    with torch.device("meta"):
        meta = timm.create_model(name, **options).eval()
    on_meta = discover(meta, lambda: meta(torch.zeros(1, 3, side, side, device="meta")))
    for batch in (1, 7):
        torch.manual_seed(0)
        real = timm.create_model(name, **options).eval()
        with torch.no_grad():
            run = lambda real=real, batch=batch: real(torch.randn(batch, 3, side, side))  # noqa: E731
            _same_names(on_meta, discover(real, run), batch)
    assert sum(len(ops) for ops in on_meta.values()) > 40


def _hf_folder(folder: Path, kind: str) -> Path:
    import transformers

    if kind == "vit":
        config: Any = transformers.ViTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32
        )
        transformers.ViTModel(config).save_pretrained(folder)
    else:
        config = transformers.SwinConfig(
            image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2], window_size=4
        )
        transformers.SwinModel(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "model", ["tv:resnet18", "tv:vit_b_32", "hf:vit", "hf:swin", "open_clip:ViT-S-32", "module"]
)
def test_every_source_names_the_same_ops_on_meta_and_in_real_runs(model: str, tmp_path: Path) -> None:
    """hookdump's own sources build the model on meta and for real (torchvision, Hugging Face, OpenCLIP, a
    module of the caller's): the names of both, at batch 1 and 7."""
    from hookdump.model import sources
    from hookdump.model.sources import module as module_source
    from hookdump.model.spec import ModelSpec

    if model.startswith("hf:"):
        spec = ModelSpec(f"hf:{_hf_folder(tmp_path / model[3:], model[3:])}")
    elif model == "module":
        spec = module_source.spec_for(Spelled(), None)
    else:
        spec = ModelSpec(model)
    source = sources.resolve(spec)
    meta, (real, _) = source.build_meta().eval(), source.load()
    real.eval()
    side = {"tv:resnet18": 64, "tv:vit_b_32": 224, "open_clip:ViT-S-32": 224}.get(model, 32)
    shape = (4,) if model == "module" else (3, side, side)
    on_meta = discover(meta, lambda: meta(torch.zeros(1, *shape, device="meta")))
    for batch in (1, 7):
        with torch.no_grad():
            _same_names(on_meta, discover(real, lambda batch=batch: real(torch.randn(batch, *shape))), batch)
    assert sum(len(ops) for ops in on_meta.values()) >= 8


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


@pytest.mark.parametrize(
    ("spec", "is_op"),
    [
        ("blocks.3:add_1", True), (":flatten", True), ("blocks.*:add", True),
        (r"re:blocks\.1[01]:add", True), (r"re:blocks\.(?:1|2)\.attn", False), ("re:(?P<b>blocks)", False),
        ("feat:2", False), ("blocks.3", False), (r"re:(?:blocks)\.3:add", True),
    ],
)  # fmt: skip
def test_which_layer_specs_name_op_values(spec: str, is_op: bool) -> None:
    """A ``:`` makes a spec an op spec, but not ``feat:``'s, nor a regex's ``(?:...)`` / ``(?P<...>)``."""
    from hookdump.model.opspecs import is_op_spec

    assert is_op_spec(spec) is is_op


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_names_on_cuda_are_the_names_on_meta() -> None:
    """The same names on a CUDA run (batch 1 and 7) as on meta: kernels differ, the forward code does not."""
    with torch.device("meta"):
        meta = timm.create_model("test_vit").eval()
    on_meta = discover(meta, lambda: meta(torch.zeros(1, 3, 64, 64, device="meta")))
    real = timm.create_model("test_vit").eval().cuda()
    for batch in (1, 7):
        with torch.no_grad():
            run = lambda batch=batch: real(torch.randn(batch, 3, 64, 64, device="cuda"))  # noqa: E731
            _same_names(on_meta, discover(real, run), batch)
