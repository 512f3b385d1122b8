"""Issue 37: capturing values a module computes in its own forward (``-l 'blocks.3:add_1'``), checked against
hand-written recomputations from module hooks and against torchlens' log of the same op, on seeded weights:
timm's ViT block (its residual stream), resnet's BasicBlock (the add before an in-place ReLU), Twins'
PosConv (the seed's ``pos_block``), torchvision, a Hugging Face ViT (SDPA and eager) and OpenCLIP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torchlens
import torchvision
from common import SKIMAGE_DATA
from helpers import photo_batch, seeded
from PIL import Image
from safetensors.torch import save_file
from torch import nn
from torch.overrides import TorchFunctionMode

import hookdump
from hookdump import api
from hookdump.model.ops import op_name


def lens(model: nn.Module, x: torch.Tensor, module: str, op: str, nth: int = 0) -> torch.Tensor:
    """torchlens' value of the ``nth`` op named ``op`` (by our naming of its function) that ``module``'s own
    forward ran in its first call, in run order."""
    log = torchlens.trace(model, x)
    found = []
    for label in log.op_labels:
        entry = log.ops[label]
        named = op_name(entry.func) if entry.func is not None else None
        if entry.module == f"{module}:1" and named is not None and named[0] == op:
            found.append(entry.tensor)
    return found[nth].detach()


def saved(capture: Any, name: str, row: int | None = None) -> torch.Tensor:
    value = torch.from_numpy(np.array(capture[name]))
    return value if row is None else value[row : row + 1]


class Kept:
    """Hand-written hooks that clone a module's input (``in:PATH``) or output (``PATH``) in a forward."""

    def __init__(self, model: nn.Module, inputs: list[str] = (), outputs: list[str] = ()) -> None:  # type: ignore[assignment]
        self.model, self.inputs, self.outputs = model, inputs, outputs
        self.values: dict[str, torch.Tensor] = {}

    def run(
        self, x: torch.Tensor, forward: Callable[[torch.Tensor], Any] | None = None
    ) -> dict[str, torch.Tensor]:
        modules = dict(self.model.named_modules())
        handles = [
            modules[p].register_forward_pre_hook(
                lambda m, a, p=p: self.values.__setitem__(f"in:{p}", a[0].clone())
            )
            for p in self.inputs
        ] + [
            modules[p].register_forward_hook(lambda m, a, o, p=p: self.values.__setitem__(p, o.clone()))
            for p in self.outputs
        ]
        try:
            with torch.no_grad():
                (forward or self.model)(x)
        finally:
            for handle in handles:
                handle.remove()
        return self.values


def capture(tmp_path: Path, model: Any, layers: list[str], photos: list[Path], **options: Any) -> Any:
    out = tmp_path / "out"
    api.capture([str(p) for p in photos], layers, model=model, out=out, workers=0, **options)
    return hookdump.open(out)


def test_vit_blocks_residual_stream_is_the_hand_recomputation_and_torchlens(tmp_path: Path) -> None:
    """The middle of block 3 (``x + drop_path1(ls1(attn(norm1(x))))`` from the block's input) and its end, for
    two photos in batches of one (the second batch keeps the value by reference until the pass ends)."""
    model, checkpoint = seeded("vit_tiny_patch16_224", tmp_path, seed=7)
    photos = [SKIMAGE_DATA / "chelsea.png", SKIMAGE_DATA / "astronaut.png"]
    spec = api.ModelSpec("vit_tiny_patch16_224", checkpoint=checkpoint)
    got = capture(tmp_path, spec, ["blocks.3:add", "blocks.3:add_1"], photos, batch_size=1)
    block = model.blocks[3]
    for row, photo in enumerate(photos):
        x = photo_batch(model, photo)
        start = Kept(model, inputs=["blocks.3"]).run(x)["in:blocks.3"]
        with torch.no_grad():
            middle = start + block.drop_path1(block.ls1(block.attn(block.norm1(start))))
            end = middle + block.drop_path2(block.ls2(block.mlp(block.norm2(middle))))
            assert torch.equal(saved(got, "blocks.3:add", row), middle)
            assert torch.equal(saved(got, "blocks.3:add_1", row), end)
            assert torch.equal(saved(got, "blocks.3:add", row), lens(model, x, "blocks.3", "add"))
            assert torch.equal(saved(got, "blocks.3:add_1", row), lens(model, x, "blocks.3", "add", 1))
    entry = next(e for e in got.manifest["tensors"] if e["layer"] == "blocks.3:add")
    assert entry["file"] == "blocks.3+add.npy"  # the documented file name; the manifest keeps the op's
    assert not [p.name for p in (tmp_path / "out").iterdir() if ":" in p.name]


def test_resnet_blocks_add_is_kept_before_the_in_place_relu(tmp_path: Path) -> None:
    """timm's BasicBlock does ``x += shortcut``, then an in-place ReLU on the same tensor: the value saved is
    the sum (bn2's output plus the block's input), not what the ReLU left there."""
    model, checkpoint = seeded("resnet18", tmp_path, seed=3)
    for module in model.modules():  # timm zero-inits the last BN's scale: a block would add nothing
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.weight.data.uniform_(0.5, 1.5)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(checkpoint))
    photos = [SKIMAGE_DATA / "chelsea.png", SKIMAGE_DATA / "coffee.png"]
    spec = api.ModelSpec("resnet18", checkpoint=checkpoint)
    got = capture(tmp_path, spec, ["layer1.0:add", "layer1.0"], photos, batch_size=1)
    for row, photo in enumerate(photos):
        x = photo_batch(model, photo)
        kept = Kept(model, inputs=["layer1.0"], outputs=["layer1.0.bn2"]).run(x)
        total = kept["layer1.0.bn2"] + kept["in:layer1.0"]
        value = saved(got, "layer1.0:add", row)
        assert torch.equal(value, total)
        assert (value < 0).any()  # before the ReLU: a kept reference would hold its zeros
        assert torch.equal(saved(got, "layer1.0", row), total.relu())
        with torch.no_grad():
            assert torch.equal(value, lens(model, x, "layer1.0", "add"))
    entry = next(e for e in got.manifest["tensors"] if e["layer"] == "layer1.0:add")
    assert entry["modified_in_place_after_hook"] is True  # the ReLU changed it after: said, not lost


def test_torchvision_resnet_add_and_a_reused_modules_second_call(tmp_path: Path, chelsea: Path) -> None:
    """torchvision's BasicBlock (``out += identity``), and ``@1`` of its ReLU, which the block calls twice:
    the second call's value is the block's output."""
    torch.manual_seed(5)
    tv = torchvision.models.resnet18().eval()
    transform = torchvision.models.ResNet18_Weights.DEFAULT.transforms()
    got = capture(tmp_path, tv, ["layer2.1:add", "layer1.0.relu:relu@1"], [chelsea], transform=transform)
    x = transform(Image.open(chelsea).convert("RGB"))[None]
    kept = Kept(tv, inputs=["layer2.1"], outputs=["layer2.1.bn2", "layer1.0"]).run(x)
    assert torch.equal(saved(got, "layer2.1:add"), kept["layer2.1.bn2"] + kept["in:layer2.1"])
    assert torch.equal(saved(got, "layer1.0.relu:relu@1"), kept["layer1.0"])
    with torch.no_grad():
        assert torch.equal(saved(got, "layer2.1:add"), lens(tv, x, "layer2.1", "add"))
    assert sorted(p.name for p in (tmp_path / "out").glob("*.npy")) == [
        "layer1.0.relu+relu@1.npy",
        "layer2.1+add.npy",
    ]


def test_twins_posconv_add_is_proj_plus_its_input(tmp_path: Path) -> None:
    """The seed's model family: PosConv does ``x = proj(cnn_feat); x += cnn_feat``, cnn_feat being its token
    input as a map; ``pos_block.0:add`` is that sum, as a (N, C, H, W) map."""
    model, checkpoint = seeded("twins_svt_small", tmp_path, seed=11)
    spec = api.ModelSpec("twins_svt_small", checkpoint=checkpoint)
    got = capture(tmp_path, spec, ["pos_block.0:add"], [SKIMAGE_DATA / "chelsea.png"])
    x = photo_batch(model, SKIMAGE_DATA / "chelsea.png")
    kept = Kept(model, inputs=["pos_block.0"], outputs=["pos_block.0.proj"]).run(x)
    tokens = kept["in:pos_block.0"]
    as_map = tokens.transpose(1, 2).reshape(kept["pos_block.0.proj"].shape)
    assert torch.equal(saved(got, "pos_block.0:add"), kept["pos_block.0.proj"] + as_map)
    with torch.no_grad():
        assert torch.equal(saved(got, "pos_block.0:add"), lens(model, x, "pos_block.0", "add"))


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_hugging_face_vit_residual_add(tmp_path: Path, chelsea: Path, attention: str) -> None:
    """``hf:`` a small random ViTModel (save_pretrained): layer 0's first residual add (``hidden_states +
    residual``) is its attention's output plus the layer's input, with SDPA and with eager attention (whose
    ops differ: each is discovered as it runs). The pixels are those the capture fed (embeddings' input)."""
    import transformers

    folder = tmp_path / "vit"
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32
    )
    torch.manual_seed(2)
    transformers.ViTModel(config).save_pretrained(folder)
    layers = ["layers.0:add", "embeddings"] + ["layers.0.attention"] * (attention == "eager")
    # --attention runs the hooked layers' eager path (the rest stays SDPA): the ops of that path are named
    got = capture(tmp_path, f"hf:{folder}", layers, [chelsea], what="both", attention=attention == "eager")
    model = transformers.ViTModel.from_pretrained(folder, attn_implementation=attention).eval()
    pixels = saved(got, "embeddings.in0")
    kept = Kept(model, inputs=["layers.0"]).run(pixels)
    layer = model.layers[0]
    with torch.no_grad():
        attended = layer.attention(layer.layernorm_before(kept["in:layers.0"]))[0]
        assert torch.equal(saved(got, "layers.0:add"), attended + kept["in:layers.0"])
        assert torch.equal(saved(got, "layers.0:add"), lens(model, pixels, "layers.0", "add"))


def test_open_clip_resblocks_residual_add(tmp_path: Path, chelsea: Path) -> None:
    """OpenCLIP's ResidualAttentionBlock (``q_x + ls_1(attention(ln_1(q_x)))``), the visual tower passed as a
    module of the caller's with OpenCLIP's own eval transform. Its nn.MultiheadAttention has a fused fast
    path that torch turns off under any torch function mode: the capture says so, and the value is the hand
    recomputation's on the regular path (bitwise), a plain run's to rounding."""
    import open_clip

    torch.manual_seed(4)
    model, _, preprocess = open_clip.create_model_and_transforms("ViT-S-32")
    visual = model.visual.eval()
    out = tmp_path / "out"
    done = api.capture(
        [str(chelsea)], ["transformer.resblocks.1:add"], model=visual, out=out, transform=preprocess
    )
    assert any(
        "transformer.resblocks.1.attn (MultiheadAttention) run their regular path" in n for n in done.notes
    )
    got = hookdump.open(out)
    x = preprocess(Image.open(chelsea).convert("RGB"))[None]
    kept = Kept(visual, inputs=["transformer.resblocks.1"]).run(x)
    block = visual.transformer.resblocks[1]
    start = kept["in:transformer.resblocks.1"]
    value = saved(got, "transformer.resblocks.1:add")
    with torch.no_grad():
        fast = start + block.ls_1(block.attention(block.ln_1(start)))
        with _Plain():
            regular = start + block.ls_1(block.attention(block.ln_1(start)))
    assert torch.equal(value, regular)
    assert torch.allclose(value, fast, atol=1e-5) and not torch.equal(regular, fast)
    with torch.no_grad():  # torchlens runs every block on the regular path, block 0 too: to rounding
        assert torch.allclose(value, lens(visual, x, "transformer.resblocks.1", "add"), atol=1e-5)


class _Plain(TorchFunctionMode):
    """A torch function mode that changes nothing: nn.MultiheadAttention takes its regular path under it."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


SCOPED = [
    ("test_vit", "blocks.1.attn"),
    ("test_convnext", "stages.1.blocks.0"),
    ("test_efficientnet", "blocks.3.0.se"),
    ("twins_svt_small", "blocks.0.0.attn"),
    ("coat_lite_tiny", "serial_blocks1.0.factoratt_crpe"),
    ("mvitv2_tiny", "stages.1.blocks.0.attn"),
    ("swin_tiny_patch4_window7_224", "layers.1.blocks.1"),
    ("tv:resnet18", "layer1.0"),
    ("open_clip:ViT-S-32", "visual.transformer.resblocks.0.attn"),
]


@pytest.mark.parametrize(("model", "module"), SCOPED, ids=[m for m, _ in SCOPED])
def test_the_scoped_watch_names_every_op_as_the_meta_trace_does(
    model: str, module: str, tmp_path: Path
) -> None:
    """Every op of one module (``MODULE:*``), captured in two passes of one photo each, with only that
    module's forward watched: each name the meta trace gave ran, in every pass, as often as there, with the
    traced shape but for the batch (a capture stops at the first name that did not)."""
    spec = api.ModelSpec(model, seed=1)
    tree = api.list_modules(spec, ops=True)
    traced = {op.name: op for op in (tree.inventory.ops or {})[module]}
    photos = [SKIMAGE_DATA / "chelsea.png", SKIMAGE_DATA / "coffee.png"]
    got = capture(tmp_path, spec, [f"{module}:*"], photos, batch_size=1)
    names = [e["layer"] for e in got.manifest["tensors"]]
    traced = {name: op for name, op in traced.items() if op.batch_axis == 0}  # the pattern leaves the others
    assert sorted(set(names)) == sorted(traced) and traced
    for entry in got.manifest["tensors"]:  # batch first (or windows of it): two passes of one photo
        shape = traced[entry["layer"]].shapes[int(entry["index"]) if entry["index"] is not None else 0]
        assert entry["shape"] == [2 * shape[0], *shape[1:]], (entry, shape)
