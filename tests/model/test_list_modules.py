"""`hookdump list-modules`: views, JSON, summary, the CPU fallback, the one meta build.

Expected values come from the real model (``timm.create_model`` and ``named_modules()``), not from hookdump.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch

from hookdump import api
from hookdump.model.sources.timm import create as models
from hookdump.model.sources.timm.names import resolve_name
from hookdump.model.spec import ModelSpec

JSON_KEYS = {
    "name", "type", "params", "calls", "fires", "container", "output_shapes", "depth", "children", "reason",
    "feature_levels",
}  # fmt: skip


@pytest.fixture(scope="module")
def resnet() -> torch.nn.Module:
    return timm.create_model("test_resnet")


@pytest.fixture(scope="module")
def twins() -> torch.nn.Module:
    return timm.create_model("twins_svt_small")


def listed(cli, *args: str) -> list[dict]:
    result = cli("list-modules", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_json_lists_every_module_with_the_documented_keys(cli, resnet: torch.nn.Module) -> None:
    rows = listed(cli, "test_resnet", "--input-size", "3,64,64")
    expected = [(n, type(m).__name__) for n, m in resnet.named_modules() if n]
    assert [(r["name"], r["type"]) for r in rows] == expected
    assert all(set(r) == JSON_KEYS for r in rows)
    by_name = {r["name"]: r for r in rows}
    for name, module in resnet.named_modules():
        if name:
            assert by_name[name]["params"] == sum(p.numel() for p in module.parameters(recurse=False))
            assert by_name[name]["children"] == [f"{name}.{c}" for c, _ in module.named_children()]
    assert by_name["conv1.0"]["output_shapes"] == [[1, 16, 32, 32]]  # stride-2 stem conv on 64x64
    assert by_name["fc"]["output_shapes"] == [[1, 1000]]
    assert by_name["fc"] | {"output_shapes": None} == {
        "name": "fc", "type": "Linear", "params": 96 * 1000 + 1000, "calls": 1, "fires": True,
        "container": False, "output_shapes": None, "depth": 1, "children": [], "reason": None,
        "feature_levels": [],
    }  # fmt: skip


def test_containers_and_never_called_modules_say_why(cli) -> None:
    rows = {r["name"]: r for r in listed(cli, "twins_svt_small")}
    assert rows["pos_block"]["container"] and rows["pos_block"]["fires"] is False
    assert rows["pos_block"]["calls"] == 0 and "container" in rows["pos_block"]["reason"]
    drop = rows["blocks.0.0.attn.attn_drop"]  # fused attention: the dropout module is never called
    assert drop["fires"] is False and not drop["container"] and "never called" in drop["reason"]
    assert rows["pos_block.3.proj.0"]["fires"] is True and rows["pos_block.3.proj.0"]["reason"] is None


def test_depth_keeps_the_top_levels_and_counts_what_it_folds(cli, twins: torch.nn.Module) -> None:
    rows = listed(cli, "twins_svt_small", "--depth", "1")
    assert [r["name"] for r in rows] == [n for n, _ in twins.named_children()]
    result = cli("list-modules", "twins_svt_small", "--depth", "1")
    below = sum(1 for n, _ in twins.named_modules() if n.startswith("pos_block."))
    assert f"pos_block  ModuleList  (+{below} below)" in result.stdout
    total = sum(1 for n, _ in twins.named_modules() if n)
    assert f"{len(rows)} shown of {total} modules" in result.stdout.splitlines()[-1]


def test_depth_must_be_positive(cli) -> None:
    result = cli("list-modules", "test_resnet", "--depth", "0")
    assert result.exit_code == 2


def test_filter_glob_uses_the_layer_matcher(cli, twins: torch.nn.Module) -> None:
    rows = listed(cli, "twins_svt_small", "--filter", "pos_block.*")
    assert [r["name"] for r in rows] == ["pos_block.0", "pos_block.1", "pos_block.2", "pos_block.3"]
    rows = listed(cli, "twins_svt_small", "--filter", "blocks.*.*.attn")
    expected = [n for n, m in twins.named_modules() if n.endswith(".attn") and n.count(".") == 3]
    assert [r["name"] for r in rows] == expected and len(expected) == sum(twins.depths)
    rows = listed(cli, "twins_svt_small", "--filter", "pos_block.[03]")  # a set after a dot, not an index
    assert [r["name"] for r in rows] == ["pos_block.0", "pos_block.3"]
    rows = listed(cli, "twins_svt_small", "--filter", r"re:^blocks\.3\.\d+\.mlp$")
    assert [r["name"] for r in rows] == [f"blocks.3.{i}.mlp" for i in range(twins.depths[3])]


def test_filter_plain_path_shows_its_subtree_flat(cli, twins: torch.nn.Module) -> None:
    result = cli("list-modules", "twins_svt_small", "--filter", "pos_block[3]")
    assert result.exit_code == 0, result.stderr
    expected = [n for n, _ in twins.named_modules() if n == "pos_block.3" or n.startswith("pos_block.3.")]
    lines = result.stdout.splitlines()
    assert [line.split()[1] for line in lines[1:-1]] == expected
    assert lines[-1].startswith(f"{len(expected)} shown of ")


def test_filter_unknown_path_suggests_real_ones(cli) -> None:
    result = cli("list-modules", "twins_svt_small", "--filter", "pos_blok.3")
    assert result.exit_code == 3
    assert "Did you mean: pos_block.3" in result.stderr


def test_filter_that_matches_nothing_says_so(cli) -> None:
    result = cli("list-modules", "test_resnet", "--filter", "nothing.*")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1].startswith("0 shown of 70 modules")


def test_leaves_are_the_modules_without_children(cli, twins: torch.nn.Module) -> None:
    rows = listed(cli, "twins_svt_small", "--leaves")
    assert [r["name"] for r in rows] == [n for n, m in twins.named_modules() if n and not list(m.children())]
    rows = listed(cli, "twins_svt_small", "--leaves", "--filter", "pos_block.**")
    assert [r["name"] for r in rows] == [f"pos_block.{i}.proj.0" for i in range(4)]


def test_summary_counts_match_the_real_model(cli, twins: torch.nn.Module) -> None:
    result = cli("list-modules", "twins_svt_small")
    modules = [m for n, m in twins.named_modules() if n]
    containers = sum(1 for m in modules if type(m).forward is torch.nn.Module.forward)
    params = sum(p.numel() for p in twins.parameters()) / 1e6
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith(f"{len(modules)} modules, ")
    assert f"({containers} containers, " in summary
    assert f"{params:.1f}M parameters; input 3x224x224 (traced on meta)" in summary


def test_no_shapes_skips_the_pass(cli) -> None:
    rows = {r["name"]: r for r in listed(cli, "twins_svt_small", "--no-shapes")}
    assert rows["head"]["calls"] is None and rows["head"]["output_shapes"] == []
    assert rows["head"]["fires"] is None and rows["pos_block"]["fires"] is False
    result = cli("list-modules", "twins_svt_small", "--no-shapes")
    assert "not traced" in result.stdout.splitlines()[-1]


def test_model_that_cannot_run_on_meta_falls_back_to_cpu(cli, plugins: Path) -> None:
    plugin = plugins / "meta_unfriendly_plugin.py"
    result = cli("list-modules", "--import", plugin, "reads_a_value", "--input-size", "3,8,8")
    assert result.exit_code == 0, result.stderr
    assert "traced with a real cpu pass" in result.stderr
    assert "(traced on cpu)" in result.stdout
    assert "head  Linear  10 params  -> (1, 2)" in result.stdout
    assert "spare  Linear  20 params  [never called in forward" in result.stdout


def test_the_model_is_built_once_on_meta(plugins: Path) -> None:
    spec = ModelSpec("counted_lenet", (str(plugins / "meta_unfriendly_plugin.py"),))
    resolve_name(spec)
    builds = sys.modules["hookdump_plugin_meta_unfriendly_plugin"].BUILDS
    builds.clear()
    tree = api.list_modules(spec, input_size=None)
    assert builds == ["meta"]
    assert tree.inventory.traced_on == "meta" and tree.inventory.input_size == (3, 224, 224)


@pytest.mark.parametrize("name", ["test_vit", "test_efficientnet", "twins_svt_small"])
def test_meta_build_skips_init_but_keeps_every_shape(name: str) -> None:
    meta = models.build(name, meta=True)
    real = timm.create_model(name)
    assert all(p.is_meta for p in meta.parameters())
    meta_state = {k: (tuple(v.shape), v.dtype) for k, v in meta.state_dict().items()}
    assert meta_state == {k: (tuple(v.shape), v.dtype) for k, v in real.state_dict().items()}
    assert [n for n, p in meta.named_parameters() if p.requires_grad] == [
        n for n, p in real.named_parameters() if p.requires_grad
    ]


def test_list_modules_help_imports_no_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hookdump", "list-modules", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "--filter" in proc.stdout and "--leaves" in proc.stdout
    assert "| torch\n" not in proc.stderr and "| timm\n" not in proc.stderr
