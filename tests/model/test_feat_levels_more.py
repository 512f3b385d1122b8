"""``feat:K`` beyond the families of ``test_feat_levels.py``: K indexes ``feature_info`` (not
``features_only``'s default ``out_indices``), levels that were refused though timm returns them (Inception at
160 px, MViTv2, Hiera's last stage), and a tuple's one element (CoaT). Each is checked against
``timm.create_model(name, features_only=True, out_indices=...)`` with the same seeded weights and photo."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from helpers import as_map, base_key, seeded_pth
from PIL import Image
from timm.data import create_transform, resolve_data_config


def timm_levels(name: str, base: torch.nn.Module, out_indices: tuple[int, ...]) -> torch.nn.Module:
    """timm's features model of ``name`` for exactly ``out_indices``, carrying ``base``'s weights."""
    model = timm.create_model(name, features_only=True, out_indices=out_indices).eval()
    weights = base.state_dict()
    model.load_state_dict({k: weights[base_key(k, weights)] for k in model.state_dict()}, strict=True)
    return model


def photo(base: torch.nn.Module, path: Path, size: tuple[int, int, int] | None = None) -> torch.Tensor:
    config = resolve_data_config({"input_size": size} if size else {}, model=base)
    return create_transform(**config, is_training=False)(Image.open(path).convert("RGB")).unsqueeze(0)


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def captured(cli, name: str, seed: int, folder: Path, *args: object) -> tuple[torch.nn.Module, Path, object]:
    """``name`` with seeded weights (the model, for the oracle) captured with ``args`` into ``folder/out``
    through the CLI, checked to exit 0."""
    base, checkpoint = seeded_pth(name, folder, seed=seed)
    out = folder / "out"
    result = cli("capture", "-m", name, "--checkpoint", checkpoint, *args, "-o", out)
    assert result.exit_code == 0, result.stderr
    return base, out, result


@pytest.mark.parametrize(
    ("name", "specs", "indices", "files"),
    [
        # ViTs: features_only's default out_indices are the last three blocks; feat:3 is still blocks.3
        ("vit_tiny_patch16_224", ["feat:3", "feat:-1"], (3, 11), ["blocks.3", "blocks.11"]),
        # SelecSLS: six levels, features_only's default returns five; feat:5 (feat:-1) is head.3
        ("selecsls42b", ["feat:0", "feat:-1"], (0, 5), ["stem.2", "head.3"]),
    ],
)
def test_k_indexes_feature_info_not_the_default_out_indices(
    cli,
    tmp_path: Path,
    chelsea: Path,
    name: str,
    specs: list[str],
    indices: tuple[int, ...],
    files: list[str],
) -> None:
    default = timm.create_model(name, features_only=True).feature_info.out_indices
    assert tuple(default) != tuple(range(len(timm.create_model(name).feature_info)))  # the trap is there
    layers = [arg for spec in specs for arg in ("-l", spec)]
    base, out, _ = captured(cli, name, 3, tmp_path, *layers, chelsea)
    with torch.no_grad():
        expected = timm_levels(name, base, indices)(photo(base, chelsea))
    for file, want in zip(files, expected, strict=True):
        got = as_map(torch.from_numpy(np.load(out / f"{file}.npy")), want)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4, msg=file)


def test_inception_at_160_px_gives_its_last_level(cli, tmp_path: Path, chelsea: Path) -> None:
    """Unpadded convs leave a 3x3 map at 1/32 of 160 px (not 5x5): timm returns it, and so does feat:4."""
    base, out, _ = captured(
        cli, "inception_v3", 4, tmp_path, "--input-size", "3,160,160", "-l", "feat:4", chelsea
    )
    with torch.no_grad():
        (want,) = timm_levels("inception_v3", base, (4,))(photo(base, chelsea, (3, 160, 160)))
    assert want.shape[-2:] == (3, 3)
    torch.testing.assert_close(torch.from_numpy(np.load(out / "Mixed_7c.npy")), want, atol=1e-5, rtol=1e-4)


def test_mvitv2_levels_are_its_stages_tokens(cli, tmp_path: Path, chelsea: Path) -> None:
    """timm's ``block.K`` is no module: it is the tokens ``stages.K`` returns (a tuple with its size)."""
    base, out, result = captured(cli, "mvitv2_tiny", 5, tmp_path, "-l", "feat:*", chelsea)
    files = [f"stages.{k}.out0" for k in range(4)]
    assert sorted(t["file"] for t in manifest(out)["tensors"]) == sorted(f"{f}.npy" for f in files)
    with torch.no_grad():
        expected = timm_levels("mvitv2_tiny", base, (0, 1, 2, 3))(photo(base, chelsea))
    for level, (file, want) in enumerate(zip(files, expected, strict=True)):
        got = as_map(torch.from_numpy(np.load(out / f"{file}.npy")), want)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4, msg=file)
        assert f"feat:{level} = stages.{level} output 0 (.out0) (" in result.stderr


def test_hiera_last_level_is_captured_and_the_others_named(cli, tmp_path: Path, chelsea: Path) -> None:
    """After Hiera's last pooling nothing is left to reroll: ``blocks.11`` reshaped is timm's level 3, bit for
    bit. ``feat:*`` captures it and names the three levels it cannot capture."""
    base, out, result = captured(cli, "hiera_tiny_224", 6, tmp_path, "-l", "feat:*", chelsea)
    assert [t["file"] for t in manifest(out)["tensors"]] == ["blocks.11.npy"]
    with torch.no_grad():
        (want,) = timm_levels("hiera_tiny_224", base, (3,))(photo(base, chelsea))
    got = as_map(torch.from_numpy(np.load(out / "blocks.11.npy")), want)
    assert torch.equal(got, want)
    notes = " ".join(manifest(out)["notes"])
    for level, block in enumerate(["blocks.0", "blocks.2", "blocks.9"]):
        assert f"feat:{level} of hiera_tiny_224 skipped: Hiera's `{block}`" in result.stderr
        assert f"feat:{level} of hiera_tiny_224 skipped" in notes


def test_coat_level_of_a_tuple_writes_that_element_only(cli, tmp_path: Path, chelsea: Path) -> None:
    base, out, _ = captured(cli, "coat_tiny", 7, tmp_path, "-l", "feat:-1", chelsea)
    assert [t["file"] for t in manifest(out)["tensors"]] == ["parallel_blocks.5.out3.npy"]
    assert sorted(p.name for p in out.glob("*.npy")) == ["parallel_blocks.5.out3.npy"]
    with torch.no_grad():
        (want,) = timm_levels("coat_tiny", base, (3,))(photo(base, chelsea))
    got = as_map(torch.from_numpy(np.load(out / "parallel_blocks.5.out3.npy")), want)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
