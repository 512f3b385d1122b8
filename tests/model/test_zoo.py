"""The inventory against the truth: for a sample of the zoo, hand-written forward hooks on a real CPU pass.

hookdump traces on the meta device (no weights, weight init skipped, a few ops' shapes computed directly).
Here each model is also built for real (random init, eval, no_grad) and run once on CPU with a plain
``register_forward_hook`` on every module, written here and independent of hookdump's recorder: the
modules that fire, how often, and the shapes of what they return must be what the inventory said.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import timm
import torch

from hookdump import api

SMALL = (3, 64, 64)

#: (timm name, input size or None for the model's own). The smallest variant of each family; models that
#: accept any size run at 64x64, models with a fixed grid (ViT, Swin, LeViT, ...) at their own size.
ZOO: list[tuple[str, tuple[int, int, int] | None]] = [
    ("test_resnet", SMALL),
    ("resnet10t", SMALL),
    ("skresnet18", SMALL),
    ("resnest14d", SMALL),
    ("test_vit", None),
    ("test_vit_relpos", None),
    ("vit_tiny_patch16_224", None),
    ("deit_tiny_distilled_patch16_224", None),
    ("swin_tiny_patch4_window7_224", None),
    ("test_convnext", SMALL),
    ("convnext_atto", SMALL),
    ("test_efficientnet", SMALL),
    ("test_efficientnet_gn", SMALL),
    ("efficientnet_lite0", SMALL),
    ("tinynet_e", SMALL),
    ("mobilenetv3_small_050", SMALL),
    ("mobilenetv2_050", SMALL),
    ("mobilenetv4_conv_small", SMALL),
    ("regnetx_002", SMALL),
    ("twins_svt_small", SMALL),
    ("pvt_v2_b0", SMALL),
    ("test_maxvit", None),
    ("test_coatnet", None),
    ("levit_128s", None),
    ("eva02_tiny_patch14_224", None),
    ("beit_base_patch16_224", None),
    ("mixer_s16_224", None),
    ("resmlp_12_224", None),
    ("gmlp_ti16_224", None),
    ("cait_xxs24_224", None),
    ("xcit_nano_12_p16_224", None),
    ("poolformer_s12", SMALL),
    ("edgenext_xx_small", SMALL),
    ("test_nfnet", SMALL),
    ("test_byobnet", SMALL),
    ("test_mambaout", SMALL),
    ("densenet121", SMALL),
    ("ghostnet_100", SMALL),
    ("rexnet_100", SMALL),
    ("lcnet_050", SMALL),
    ("mobilevit_xxs", SMALL),
    ("efficientformer_l1", None),
    ("efficientvit_b0", SMALL),
    ("tiny_vit_5m_224", None),
    ("fastvit_t8", SMALL),
    ("convit_tiny", None),
    ("pit_ti_224", None),
    ("crossvit_tiny_240", None),
    ("hrnet_w18_small", SMALL),
    ("starnet_s050", SMALL),
    ("mobileone_s0", SMALL),
]


def tensor_shapes(obj: Any) -> list[list[int]]:
    """Shapes of every tensor inside an output, depth first (written here, not taken from hookdump)."""
    if isinstance(obj, torch.Tensor):
        return [list(obj.shape)]
    if isinstance(obj, (tuple, list)):
        return [s for item in obj for s in tensor_shapes(item)]
    if isinstance(obj, dict):
        return [s for item in obj.values() for s in tensor_shapes(item)]
    return []


def real_pass(name: str, size: tuple[int, ...]) -> tuple[Counter[str], dict[str, list[list[int]]]]:
    """Calls and first output shapes of every module, from real hooks on a real CPU forward."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    calls: Counter[str] = Counter()
    shapes: dict[str, list[list[int]]] = {}
    handles = []
    for path, module in model.named_modules():
        if not path:
            continue

        def hook(module: torch.nn.Module, args: Any, output: Any, path: str = path) -> None:
            calls[path] += 1
            shapes.setdefault(path, tensor_shapes(output))

        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(torch.randn(1, *size))
    finally:
        for handle in handles:
            handle.remove()
    return calls, shapes


@pytest.mark.parametrize(("name", "size"), ZOO, ids=[name for name, _ in ZOO])
def test_inventory_matches_real_hooks(name: str, size: tuple[int, int, int] | None) -> None:
    tree = api.list_modules(name, input_size=size)
    inv = tree.inventory
    assert inv.traced_on == "meta", tree.notes
    calls, shapes = real_pass(name, inv.input_size)

    said_fire = {m.name for m in inv.modules if m.fires}
    said_never = {m.name for m in inv.modules if m.fires is False}
    assert said_fire | said_never == set(inv.names)
    assert sorted(said_fire - set(calls)) == [], "the inventory says these fire; real hooks never ran"
    assert sorted(said_never & set(calls)) == [], "the inventory says these never run; real hooks ran"
    assert {m.name: m.calls for m in inv.modules if m.calls} == dict(calls)
    wrong = {m.name: (m.output_shapes, shapes[m.name]) for m in inv.modules if m.fires}
    assert {k: v for k, v in wrong.items() if v[0] != v[1]} == {}


def test_the_sample_spans_the_families() -> None:
    names = " ".join(name for name, _ in ZOO)
    families = "resnet vit deit swin convnext efficientnet mobilenet regnet twins pvt maxvit coatnet levit"
    families += " eva beit mixer cait xcit poolformer edgenext"
    assert [f for f in families.split() if f not in names] == []
    assert len(ZOO) >= 40
