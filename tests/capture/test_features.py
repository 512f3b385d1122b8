"""Every capture capability on small real models: selection, inputs, structured outputs, repeated calls,
gradients, in-place detection, early stop, precision, and models that cannot be hooked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from common import PLUGINS
from helpers import odd_model, seeded
from safetensors.torch import load_file, save_file

from hookdump import api
from hookdump.errors import InputError, LayerError, UsageError
from hookdump.inputs.spec import InputSpec

ODD = ("--import", str(PLUGINS / "odd_plugin.py"), "-m", "odd_net", "--input-size", "3,8,8", "--random-input")


def _x(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """The input hookdump's --random-input makes for this seed."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def odd(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return odd_model(tmp_path_factory.mktemp("odd"), seed=3)


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


# --- selection ---------------------------------------------------------------------------------------


def test_globs_and_regex_pick_the_same_modules(cli, tmp_path: Path) -> None:
    glob = cli("capture", "-m", "twins_svt_small", "-l", "pos_block.*.proj.0", "--random-input", "--dry-run")
    regex = cli(
        "capture",
        "-m",
        "twins_svt_small",
        "-l",
        r"re:^pos_block\.\d\.proj\.0$",
        "--random-input",
        "--dry-run",
    )
    assert glob.exit_code == regex.exit_code == 0
    assert glob.stdout == regex.stdout
    assert "would hook 4 module(s)" in glob.stdout and "pos_block.3.proj.0  Conv2d" in glob.stdout
    attn = cli(
        "capture", "-m", "twins_svt_small", "-l", "blocks.*.*.attn", "--random-input", "--dry-run", "--json"
    )
    names = [m["name"] for m in json.loads(attn.stdout)]
    assert len(names) == 2 + 2 + 10 + 4 and all(n.endswith(".attn") for n in names)
    assert not (tmp_path / "hookdump-out").exists()


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("blocks.*.*.atn", "matches no module"),
        ("pos_block", "is a ModuleList"),
        ("blocks.*", "matches only modules that never fire"),
        ("re:^nothing$", "matches no module"),
    ],
)
def test_patterns_that_match_nothing_useful(cli, spec: str, text: str) -> None:
    result = cli("capture", "-m", "twins_svt_small", "-l", spec, "--random-input", "--dry-run")
    assert result.exit_code == 3
    assert text in result.stderr


def test_glob_typo_suggests_paths(cli) -> None:
    result = cli("capture", "-m", "twins_svt_small", "-l", "blocks.*.*.atn", "--random-input", "--dry-run")
    assert "blocks.0.0.attn" in result.stderr


# --- inputs, structured outputs, repeated calls ---------------------------------------------------------


def test_inputs_outputs_and_structures_match_a_hand_computation(odd, tmp_path: Path) -> None:
    model, checkpoint = odd
    spec = api.ModelSpec("odd_net", imports=(str(PLUGINS / "odd_plugin.py"),), checkpoint=checkpoint)
    source = InputSpec(random=True, seed=4, input_size=(3, 8, 8))
    result = api.capture(
        source, ["conv", "split", "gate", "head"], model=spec, out=tmp_path / "o", what="both"
    )
    x = _x((1, 3, 8, 8), 4)
    with torch.no_grad():
        conv = model.conv(x)  # before the in-place `+= 1`
        y = torch.relu(conv + 1.0)
        y = torch.relu(model.conv2(y)) + torch.relu(-y)
        pooled = y.mean(dim=1).mean(dim=(1, 2)).unsqueeze(1).expand(-1, 8)
        logits = model.head.fc(pooled * model.scale)
    load = {p.stem: np.load(p) for p in result.out.glob("*.npy")}
    np.testing.assert_allclose(load["conv.in0"], x.numpy(), atol=1e-6)
    np.testing.assert_allclose(load["conv"], conv.numpy(), atol=1e-6)
    np.testing.assert_allclose(load["split.outmean"], y.mean(dim=1).numpy(), atol=1e-6)
    np.testing.assert_allclose(load["split.outparts.0"], y.clamp(max=0).numpy(), atol=1e-6)
    np.testing.assert_allclose(load["split.outparts.1"], y.clamp(min=0).numpy(), atol=1e-6)
    np.testing.assert_allclose(load["gate.inscale"], model.scale.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(load["head.outlogits"], logits.numpy(), atol=1e-6)
    values = {(v["layer"], v["index"]): v["value"] for v in _manifest(result.out)["values"]}
    assert values == {("split", "channels"): "8", ("head", "scale"): "2.0"}
    flagged = {t["file"] for t in _manifest(result.out)["tensors"] if t["modified_in_place_after_hook"]}
    assert flagged == {"conv.npy"}
    assert any("conv (output) was changed in place" in n for n in result.notes)


def test_reused_module_one_file_per_call_and_call_selection(cli, odd, tmp_path: Path) -> None:
    model, checkpoint = odd
    every = cli("capture", *ODD, "--checkpoint", checkpoint, "-l", "act", "-o", tmp_path / "a", "--seed", "1")
    assert every.exit_code == 0, every.stderr
    assert "act runs 3 times per forward" in every.stderr
    files = sorted(p.name for p in (tmp_path / "a").glob("*.npy"))
    assert files == ["act@0.npy", "act@1.npy", "act@2.npy"]
    seen: list[torch.Tensor] = []
    handle = model.act.register_forward_hook(lambda m, a, o: seen.append(o.clone()))
    try:
        with torch.no_grad():
            model(_x((1, 3, 8, 8), 1))
    finally:
        handle.remove()
    for k in range(3):
        np.testing.assert_allclose(np.load(tmp_path / "a" / f"act@{k}.npy"), seen[k].numpy(), atol=1e-6)
    one = cli("capture", *ODD, "--checkpoint", checkpoint, "-l", "act@1", "-o", tmp_path / "b", "--seed", "1")
    assert one.exit_code == 0, one.stderr
    assert sorted(p.name for p in (tmp_path / "b").glob("*.npy")) == ["act@1.npy"]
    np.testing.assert_array_equal(
        np.load(tmp_path / "b" / "act@1.npy"), np.load(tmp_path / "a" / "act@1.npy")
    )
    too_far = cli("capture", *ODD, "-l", "act@3", "-o", tmp_path / "c")
    assert too_far.exit_code == 3 and "act runs 3 time(s) per forward pass" in too_far.stderr


# --- gradients ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return seeded("test_resnet", tmp_path_factory.mktemp("resnet"), seed=21)


@pytest.mark.parametrize("target", [None, 7])
def test_gradients_match_autograd_on_a_split_model(resnet, tmp_path: Path, target: int | None) -> None:
    """Oracle: run the stem and layer1..2 by hand, make that a leaf, run the rest, torch.autograd.grad."""
    model, checkpoint = resnet
    source = InputSpec(random=True, seed=9, input_size=(3, 64, 64))
    spec = api.ModelSpec("test_resnet", checkpoint=checkpoint)
    result = api.capture(source, ["layer2"], model=spec, out=tmp_path / "o", grad=True, target=target)
    x = _x((1, 3, 64, 64), 9)
    with torch.no_grad():
        mid = model.layer2(model.layer1(model.maxpool(model.act1(model.bn1(model.conv1(x))))))
    mid.requires_grad_(True)
    logits = model.forward_head(model.layer4(model.layer3(mid)))
    cls = int(logits.argmax()) if target is None else target
    (expected,) = torch.autograd.grad(logits[0, cls], mid)
    np.testing.assert_allclose(np.load(result.out / "layer2.grad.npy"), expected.numpy(), atol=1e-6)
    np.testing.assert_allclose(np.load(result.out / "layer2.npy"), mid.detach().numpy(), atol=1e-6)
    assert _manifest(result.out)["grad"] == {"target": "top" if target is None else target, "classes": [cls]}
    assert all(p.grad is None for p in model.parameters())


def test_gradient_survives_the_in_place_add_of_twins(tmp_path: Path) -> None:
    """PosConv does `x += cnn_feat_token` after proj.0: module backward hooks break, tensor hooks do not."""
    source = InputSpec(random=True, seed=0, input_size=(3, 64, 64))
    result = api.capture(source, ["pos_block.0.proj.0", "pos_block.0"], model="twins_svt_small",
                         out=tmp_path / "o", grad=True)  # fmt: skip
    conv_grad = np.load(result.out / "pos_block.0.proj.0.grad.npy")
    assert conv_grad.shape == (1, 64, 16, 16) and np.abs(conv_grad).sum() > 0
    # d(x + t)/dx = 1: the conv's output gradient is the PosConv output gradient, reshaped
    block_grad = np.load(result.out / "pos_block.0.grad.npy")  # (1, 256, 64) tokens
    np.testing.assert_allclose(conv_grad.reshape(1, 64, 256).transpose(0, 2, 1), block_grad, atol=1e-6)


def test_grad_target_out_of_range(cli, tmp_path: Path) -> None:
    negative = cli(
        "capture", "-m", "test_resnet", "-l", "layer1", "--random-input", "--grad", "--target", "-1"
    )
    assert negative.exit_code == 2 and "--target -1" in negative.stderr
    args = ("capture", "-m", "test_resnet", "-l", "layer1", "--random-input", "--grad", "--target", "1000")
    too_big = cli(*args, "-o", tmp_path / "o")
    assert too_big.exit_code == 2 and "--target 1000" in too_big.stderr and "0 ... 999" in too_big.stderr
    assert not (tmp_path / "o").exists()


# --- early stop -----------------------------------------------------------------------------------------


def test_early_stop_saves_the_same_values(tmp_path: Path) -> None:
    torch.manual_seed(0)
    checkpoint = tmp_path / "t.safetensors"
    save_file(timm.create_model("twins_svt_small").state_dict(), str(checkpoint))
    spec = api.ModelSpec("twins_svt_small", checkpoint=checkpoint)
    source = InputSpec(random=True, input_size=(3, 64, 64))
    early = api.capture(source, ["pos_block.0.proj.0"], model=spec, out=tmp_path / "a")
    full = api.capture(source, ["pos_block.0.proj.0"], model=spec, out=tmp_path / "b", early_stop=False)
    assert early.stopped_early and not full.stopped_early
    np.testing.assert_array_equal(
        np.load(early.out / "pos_block.0.proj.0.npy"), np.load(full.out / "pos_block.0.proj.0.npy")
    )
    # the in-place add in PosConv still ran before the stop, so both runs report it
    assert _manifest(early.out)["tensors"][0]["modified_in_place_after_hook"] is True
    assert _manifest(full.out)["tensors"][0]["modified_in_place_after_hook"] is True


# --- precision and memory format --------------------------------------------------------------------------


def test_bfloat16_is_saved_as_float32_unless_kept(resnet, tmp_path: Path) -> None:
    _, checkpoint = resnet
    spec = api.ModelSpec("test_resnet", checkpoint=checkpoint)
    source = InputSpec(random=True, input_size=(3, 64, 64))
    f32 = api.capture(source, ["layer1"], model=spec, out=tmp_path / "f32")
    bf16 = api.capture(source, ["layer1"], model=spec, out=tmp_path / "a", dtype="bfloat16")
    entry = _manifest(bf16.out)["tensors"][0]
    assert (entry["dtype"], entry["source_dtype"]) == ("float32", "bfloat16")
    assert _manifest(bf16.out)["dtype"] == "bfloat16"
    low, ref = np.load(bf16.out / "layer1.npy"), np.load(f32.out / "layer1.npy")
    assert 0 < np.abs(low - ref).max() < 0.1 * np.abs(ref).max()
    kept = api.capture(source, ["layer1"], model=spec, out=tmp_path / "b", dtype="bfloat16",
                       save_dtype="keep", formats="pt,safetensors")  # fmt: skip
    assert torch.load(kept.out / "layer1.pt").dtype == torch.bfloat16
    assert load_file(kept.out / "tensors.safetensors")["layer1"].dtype == torch.bfloat16
    with pytest.raises(UsageError, match="numpy has no bfloat16"):
        api.capture(source, ["layer1"], model=spec, out=tmp_path / "c", dtype="bfloat16", save_dtype="keep")
    assert not (tmp_path / "c").exists()


def test_channels_last_changes_nothing_but_speed(resnet, tmp_path: Path) -> None:
    _, checkpoint = resnet
    spec = api.ModelSpec("test_resnet", checkpoint=checkpoint)
    source = InputSpec(random=True, input_size=(3, 64, 64))
    plain = api.capture(source, ["layer2"], model=spec, out=tmp_path / "a")
    last = api.capture(source, ["layer2"], model=spec, out=tmp_path / "b", channels_last=True)
    np.testing.assert_allclose(np.load(plain.out / "layer2.npy"), np.load(last.out / "layer2.npy"), atol=1e-5)
    assert _manifest(last.out)["channels_last"] is True


# --- what cannot be hooked ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize(
    ("name", "text"), [("scripted_net", "TorchScript"), ("compiled_net", "torch.compile")]
)
def test_scripted_and_compiled_models_are_refused(cli, tmp_path: Path, name: str, text: str) -> None:
    result = cli("capture", "--import", PLUGINS / "odd_plugin.py", "-m", name, "-l", "0", "--random-input",
                 "-o", tmp_path / "o")  # fmt: skip
    assert result.exit_code == 4
    assert text in result.stderr and "hooks on its submodules would be skipped" in result.stderr
    assert not (tmp_path / "o").exists()


def test_never_called_module_in_a_plugin(tmp_path: Path) -> None:
    spec = api.ModelSpec("odd_net", imports=(str(PLUGINS / "odd_plugin.py"),))
    with pytest.raises(LayerError, match="never called in the forward pass"):
        api.capture(InputSpec(random=True, input_size=(3, 8, 8)), ["unused"], model=spec, out=tmp_path / "o")
    with pytest.raises(InputError):
        api.capture(InputSpec(random=True), ["x"], model=api.ModelSpec("nope_net"), out=tmp_path / "o")


def test_input_of_an_in_place_relu_is_saved_before_it_changes(resnet, tmp_path: Path) -> None:
    """timm's ReLU(inplace=True) overwrites its own input: the saved input keeps the negative values."""
    model, checkpoint = resnet
    assert model.act1.inplace
    source = InputSpec(random=True, seed=2, input_size=(3, 64, 64))
    spec = api.ModelSpec("test_resnet", checkpoint=checkpoint)
    result = api.capture(source, ["bn1"], model=spec, out=tmp_path / "a")
    both = api.capture(source, ["act1"], model=spec, out=tmp_path / "b", what="input")
    bn_out, relu_in = np.load(result.out / "bn1.npy"), np.load(both.out / "act1.in0.npy")
    assert (relu_in < 0).any()
    np.testing.assert_array_equal(relu_in, bn_out)
    entry = _manifest(both.out)["tensors"][0]
    assert entry["file"] == "act1.in0.npy" and entry["modified_in_place_after_hook"] is True


def test_early_stop_is_not_swallowed_by_model_code(tmp_path: Path) -> None:
    """`except Exception` in forward must not turn the early stop into a silent fallback path."""
    spec = api.ModelSpec("forgiving_net", imports=(str(PLUGINS / "odd_plugin.py"),))
    source = InputSpec(random=True, input_size=(3, 8, 8))
    result = api.capture(source, ["block.0"], model=spec, out=tmp_path / "o")
    assert result.stopped_early
    assert [t.file for t in result.tensors] == ["block.0.npy"]
