"""``--layer feat:K``: timm's feature levels by name, checked value for value against
``timm.create_model(name, features_only=True)`` with the same weights and the same photo.

The oracle never calls hookdump: the features model gets the base model's weights by state-dict key (timm
renames some: ``model.`` in front for FeatureGetterNet, ``layers_0`` for flattened Sequentials), and its
outputs are compared with the files ``capture`` wrote for the modules each family's code says they come
from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from helpers import as_map, base_key, photo_batch, seeded_pth

#: model -> the file ``capture -l 'feat:*'`` writes for each level, from reading each family's code.
FAMILIES = {
    "resnet18": ["act1", "layer1", "layer2", "layer3", "layer4"],  # FeatureListNet: named modules
    # EfficientNetFeatures / MobileNetV3Features: the stages' outputs, and the stem's for MobileNetV3
    "efficientnet_lite0": ["blocks.0", "blocks.1", "blocks.2", "blocks.4", "blocks.6"],
    "mobilenetv3_small_050": ["bn1", "blocks.0", "blocks.1", "blocks.3", "blocks.5"],
    "convnext_atto": [f"stages.{i}" for i in range(4)],  # FeatureListNet, flattened Sequential
    "regnetx_002": ["stem", "s1", "s2", "s3", "s4"],
    "vit_tiny_patch16_224": [f"blocks.{i}" for i in range(12)],  # FeatureGetterNet: tokens -> maps
    "swin_tiny_patch4_window7_224": [f"layers.{i}" for i in range(4)],  # (N, H, W, C) both ways
    "twins_svt_small": ["blocks.0.1", "blocks.1.1", "blocks.2.9", "blocks.3.3"],  # `block.K`: no module
    "coat_lite_tiny": [f"serial_blocks{i}.1" for i in range(1, 5)],  # ModuleLists, class token first
    "coat_tiny": ["serial_blocks1.1"] + [f"parallel_blocks.5.out{i}" for i in (1, 2, 3)],  # a tuple's parts
    "hrnet_w18_small": ["act1"] + [f"incre_modules.{i}" for i in range(4)],  # `stem`, `stageN`
}


def features_only(name: str, base: torch.nn.Module, levels: int, **kwargs: object) -> torch.nn.Module:
    """timm's features model of ``name`` carrying exactly ``base``'s weights (strict: every key filled)."""
    model = timm.create_model(name, features_only=True, out_indices=tuple(range(levels)), **kwargs).eval()
    weights = base.state_dict()
    model.load_state_dict({k: weights[base_key(k, weights)] for k in model.state_dict()}, strict=True)
    return model


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_level_equals_timms_features_only_output(cli, tmp_path: Path, chelsea: Path, name: str) -> None:
    base, checkpoint = seeded_pth(name, tmp_path, seed=1)
    out = tmp_path / "out"
    result = cli("capture", "-m", name, "--checkpoint", checkpoint, "-l", "feat:*", chelsea, "-o", out)
    assert result.exit_code == 0, result.stderr
    paths = FAMILIES[name]
    layers = {path.partition(".out")[0] for path in paths}
    assert {t["layer"] for t in _manifest(out)["tensors"]} == layers
    model = features_only(name, base, len(paths))
    with torch.no_grad():
        expected = model(photo_batch(base, chelsea))
    assert len(expected) == len(paths)
    for level, (path, want) in enumerate(zip(paths, expected, strict=True)):
        got = as_map(torch.from_numpy(np.load(out / f"{path}.npy")), want)
        assert got.shape == want.shape, (level, path)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4, msg=f"feat:{level} = {path}")
        layer, _, element = path.partition(".out")
        said = f"{layer} output {element} (.out{element})" if element else layer
        assert f"feat:{level} = {said} (" in result.stderr  # the note says what feat:K became
    assert f"feat:0 = {paths[0]} (" in " ".join(_manifest(out)["notes"])


SMALL_TWINS = {"depths": [1, 2, 1, 1], "embed_dims": [16, 32, 64, 128], "num_heads": [1, 2, 4, 8]}
TWINS_PLUGIN = f"""
import timm
from timm.models import register_model


@register_model
def hookdump_test_twins_one_block(pretrained=False, **kwargs):
    return timm.create_model("twins_svt_small", pretrained=pretrained, **{{**{SMALL_TWINS!r}, **kwargs}})
"""


def test_twins_stage_of_one_block_ends_at_its_pos_block(cli, tmp_path: Path, chelsea: Path) -> None:
    """Twins runs ``pos_block[K]`` after block 0 of stage K: with one block, that is where the stage ends."""
    plugin = tmp_path / "twins_one_block_plugin.py"
    plugin.write_text(TWINS_PLUGIN)
    torch.manual_seed(2)
    base = timm.create_model("twins_svt_small", **SMALL_TWINS).eval()
    torch.save(base.state_dict(), tmp_path / "w.pth")
    model = ("--import", plugin, "-m", "hookdump_test_twins_one_block", "--checkpoint", tmp_path / "w.pth")
    result = cli("capture", *model, "-l", "feat:*", chelsea, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    paths = ["pos_block.0", "blocks.1.1", "pos_block.2", "pos_block.3"]
    assert sorted(t["file"] for t in _manifest(tmp_path / "out")["tensors"]) == sorted(
        f"{p}.npy" for p in paths
    )
    with torch.no_grad():
        expected = features_only("twins_svt_small", base, 4, **SMALL_TWINS)(photo_batch(base, chelsea))
    for path, want in zip(paths, expected, strict=True):
        got = as_map(torch.from_numpy(np.load(tmp_path / "out" / f"{path}.npy")), want)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4, msg=path)


def test_dry_run_config_and_negative_index(cli, tmp_path: Path) -> None:
    result = cli("capture", "-m", "resnet18", "-l", "feat:2", "-l", "feat:-1", "--random-input", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()[1:-1]] == ["layer2", "layer4"]
    assert "note: feat:2 = layer2 (128 channels, 1/8 of the input)\n" in result.stderr
    config = tmp_path / "c.toml"
    config.write_text('[capture]\nmodel = "resnet18"\nlayer = ["feat:1"]\ninput_size = "3,64,64"\n')
    out = tmp_path / "o"
    result = cli("capture", "--config", config, "--random-input", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert [(t["file"], t["shape"]) for t in _manifest(out)["tensors"]] == [("layer1.npy", [1, 64, 16, 16])]
    assert _manifest(out)["options"]["layer"] == ["feat:1"]


def test_out_of_range_level_lists_the_levels(cli) -> None:
    result = cli("capture", "-m", "resnet18", "-l", "feat:5", "--random-input", "--dry-run")
    assert result.exit_code == 3
    info = timm.create_model("resnet18", features_only=True).feature_info
    assert "`feat:5`: resnet18 has 5 feature levels: feat:0 act1 (64 ch, 1/2); " in result.stderr
    for k in range(5):
        module, chs, red = info.module_name(k), info.channels(k), info.reduction(k)
        assert f"feat:{k} {module} ({chs} ch, 1/{red})" in result.stderr
    assert "Use feat:0 ... feat:4" in result.stderr


def test_model_without_feature_info_and_a_bad_level(cli, plugins: Path) -> None:
    lenet = ("--import", plugins / "lenet_plugin.py", "-m", "seed_lenet", "--input-size", "3,32,32")
    result = cli("capture", *lenet, "-l", "feat:0", "--random-input", "--dry-run")
    assert result.exit_code == 3
    assert "seed_lenet has no feature levels: feat:K names the stages a model declares" in result.stderr
    result = cli("capture", "-m", "resnet18", "-l", "feat:two", "--random-input", "--dry-run")
    assert result.exit_code == 2
    assert "`feat:two` is not a feature level." in result.stderr


def test_list_modules_tags_the_feature_modules(cli) -> None:
    result = cli("list-modules", "twins_svt_small", "--json")
    assert result.exit_code == 0, result.stderr
    tagged = {r["name"]: r["feature_levels"] for r in json.loads(result.stdout) if r["feature_levels"]}
    assert tagged == {path: [k] for k, path in enumerate(FAMILIES["twins_svt_small"])}
    result = cli("list-modules", "resnet18", "--depth", "1")
    info = timm.create_model("resnet18", features_only=True).feature_info
    for k, module in enumerate(info.module_name()):
        line = next(line for line in result.stdout.splitlines() if f" {module}  " in line)
        assert line.split("  (+")[0].endswith(f"  feat:{k}")
    result = cli("list-modules", "hrnet_w18_small", "--filter", "feat:*")
    assert [line.split()[1] for line in result.stdout.splitlines()[1:-1]] == FAMILIES["hrnet_w18_small"]


def test_a_level_no_module_gives_is_refused_not_guessed(cli) -> None:
    """Hiera's blocks keep tokens in mask-unit order and timm rerolls them outside any module, so the block
    ``feature_info`` names is not the feature, even up to a reshape."""
    torch.manual_seed(0)
    base = timm.create_model("hiera_tiny_224").eval()
    x = torch.randn(1, 3, 224, 224)
    seen: list[torch.Tensor] = []
    base.blocks[0].register_forward_hook(lambda module, args, output: seen.append(output))
    with torch.no_grad():
        base(x)
        want = features_only("hiera_tiny_224", base, 1)(x)[0]
    assert seen[0].shape[1:] == (want.shape[2] * want.shape[3], want.shape[1])
    # it fits a reshape, but the tokens are in another order
    assert not torch.allclose(as_map(seen[0], want), want, atol=1e-3)
    result = cli("capture", "-m", "hiera_tiny_224", "-l", "feat:0", "--random-input", "--dry-run")
    assert result.exit_code == 3
    assert "`feat:0` of hiera_tiny_224 cannot be captured exactly: Hiera's `blocks.0`" in result.stderr
    # unpadded convs make Inception's maps a little smaller than H/reduction: still its levels
    result = cli("capture", "-m", "inception_v3", "-l", "feat:*", "--random-input", "--dry-run")
    assert result.exit_code == 0, result.stderr
    info = timm.create_model("inception_v3", features_only=True).feature_info
    assert [line.split()[0] for line in result.stdout.splitlines()[1:-1]] == info.module_name()
