"""Building with --checkpoint skips weight init; the model is still exactly a normally built one with the
checkpoint loaded: parameters, persistent and non-persistent buffers, outputs. Wrapped models are refused."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
from common import PLUGINS
from safetensors.torch import save_file
from torch import nn
from torch.overrides import TorchFunctionMode

from hookdump.errors import InputError
from hookdump.model.checkpoints import read_checkpoint
from hookdump.model.sources.timm import create as models
from hookdump.model.sources.timm.plugins import import_plugins
from hookdump.model.spec import ModelSpec
from hookdump.model.weights import check_hookable

PLUGIN = PLUGINS / "startup_plugin.py"

#: Random draws that weight init makes (torch.nn.init's functions and the tensor methods under them).
DRAWS = frozenset(
    {"uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_"}
    | {"xavier_normal_", "orthogonal_", "erfinv_"}
)


class CountDraws(TorchFunctionMode):
    """Counts the random draws that reach it: under a build that skips init, none into parameters do."""

    def __init__(self) -> None:
        super().__init__()
        self.draws = 0

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        self.draws += getattr(func, "__name__", "") in DRAWS
        return func(*args, **(kwargs or {}))


def _checkpoint(name: str, folder: Path, seed: int = 1) -> Path:
    """A state dict drawn from ``seed`` (not hookdump's default seed 0), as .safetensors."""
    torch.manual_seed(seed)
    path = folder / f"{name}.safetensors"
    save_file(timm.create_model(name).state_dict(), str(path))
    return path


def _reference(name: str, path: Path) -> nn.Module:
    """What --checkpoint gave before: a normal build (its init from --seed 0), then a strict load over it."""
    torch.manual_seed(ModelSpec().seed)
    model = timm.create_model(name)
    model.load_state_dict(read_checkpoint(path), strict=True)
    return model.eval()


def _assert_same(model: nn.Module, reference: nn.Module, input_size: tuple[int, ...]) -> None:
    state, ref_state = model.state_dict(), reference.state_dict()
    assert list(state) == list(ref_state)
    for key, value in ref_state.items():
        assert state[key].dtype == value.dtype and torch.equal(state[key], value), key
    buffers, ref_buffers = dict(model.named_buffers()), dict(reference.named_buffers())
    assert list(buffers) == list(ref_buffers)
    for key, value in ref_buffers.items():  # non-persistent ones included (not in the checkpoint)
        assert buffers[key].dtype == value.dtype and torch.equal(buffers[key], value), key
    params, ref_params = dict(model.named_parameters()), dict(reference.named_parameters())
    assert list(params) == list(ref_params)
    for key, value in ref_params.items():  # those a state dict leaves out included
        assert params[key].requires_grad == value.requires_grad and torch.equal(params[key], value), key
    torch.manual_seed(7)
    x = torch.randn(1, *input_size)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), reference(x))


@pytest.mark.parametrize(
    ("name", "non_persistent"),
    [
        ("swin_tiny_patch4_window7_224", "layers.0.blocks.0.attn.relative_position_index"),
        ("eva02_tiny_patch14_224", "rope.pos_embed"),
        ("vit_tiny_patch16_224", None),
        ("twins_svt_small", None),
        ("resnet18", None),
        ("efficientnet_b0", None),
        ("convnext_atto", None),
    ],
)
def test_checkpoint_build_equals_a_normal_build(
    tmp_path: Path, name: str, non_persistent: str | None
) -> None:
    path = _checkpoint(name, tmp_path)
    reference = _reference(name, path)
    with CountDraws() as counter:
        model, notes = models.load(ModelSpec(name, checkpoint=path), name)
    assert counter.draws == 0  # no weight init ran
    assert notes == [f"weights: {path}"]
    if non_persistent is not None:
        assert non_persistent in dict(model.named_buffers()) and non_persistent not in model.state_dict()
    _assert_same(model, reference, reference.pretrained_cfg["input_size"])


@pytest.mark.parametrize("name", ["resnet18", "vit_tiny_patch16_224"])
def test_random_weights_still_come_from_the_seed(name: str) -> None:
    with CountDraws() as counter:
        model, _ = models.load(ModelSpec(name, seed=3), name)
    assert counter.draws > 0
    torch.manual_seed(3)
    reference = timm.create_model(name)
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def _plugin() -> Any:
    import_plugins((str(PLUGIN),))
    return sys.modules["hookdump_plugin_startup_plugin"]


def test_every_init_route_is_skipped_and_buffers_are_kept(tmp_path: Path) -> None:
    """init functions, `.data`, views of parameters, reset_parameters; in-place ops on buffers still run."""
    _plugin()
    path = _checkpoint("init_probe_net", tmp_path)
    with CountDraws() as counter:
        model, _ = models.load(ModelSpec("init_probe_net", checkpoint=path), "init_probe_net")
    assert counter.draws == 1  # the random non-persistent buffer `steps`, not weight init
    assert "table" not in model.state_dict() and "steps" not in model.state_dict()
    _assert_same(model, _reference("init_probe_net", path), (3, 8, 8))


@pytest.mark.parametrize(
    ("name", "builds"),
    [
        ("init_reader_net", 1),  # the skipping build raised on reading its init, the normal one finished
        ("hidden_param_net", 2),  # a parameter the checkpoint cannot overwrite: built again, normally
    ],
)
def test_a_builder_that_needs_its_init_is_built_normally(tmp_path: Path, name: str, builds: int) -> None:
    plugin = _plugin()
    path = _checkpoint(name, tmp_path)
    before = plugin.BUILDS.count(name)
    model, _ = models.load(ModelSpec(name, checkpoint=path), name)
    assert plugin.BUILDS.count(name) == before + builds
    _assert_same(model, _reference(name, path), (3, 4, 4))


def test_a_checkpoint_that_does_not_fit_still_shows_the_key_diff(tmp_path: Path) -> None:
    path = _checkpoint("resnet18", tmp_path)
    with pytest.raises(InputError, match=r"does not fit resnet34:[\s\S]*missing"):
        models.load(ModelSpec("resnet34", checkpoint=path), "resnet34")


def test_data_parallel_is_refused_with_the_fix(cli, tmp_path: Path) -> None:
    result: Any = cli(
        "capture", "--import", PLUGIN, "-m", "dp_net", "-l", "conv", "--random-input", "-o", tmp_path / "o"
    )
    assert result.exit_code == 4, result.stderr
    assert "wrapped in DataParallel" in result.stderr and "one replica's share" in result.stderr
    assert "model.module" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_distributed_data_parallel_is_refused() -> None:
    wrapped = nn.parallel.DistributedDataParallel.__new__(nn.parallel.DistributedDataParallel)
    with pytest.raises(InputError, match="wrapped in DistributedDataParallel"):
        check_hookable(wrapped, "ddp_net")
