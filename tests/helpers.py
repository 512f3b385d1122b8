"""Independent oracles and seeded models shared by the tests: nothing here calls hookdump."""

from __future__ import annotations

import sys
from pathlib import Path

import timm
import torch
from PIL import Image
from safetensors.torch import save_file
from timm.data import create_transform, resolve_data_config


def seeded(name: str, folder: Path, seed: int) -> tuple[torch.nn.Module, Path]:
    """A timm model with seeded random weights (eval mode), and those weights as a safetensors file."""
    torch.manual_seed(seed)
    model = timm.create_model(name).eval()
    path = folder / f"{name}-{seed}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model, path


def odd_model(folder: Path, seed: int) -> tuple[torch.nn.Module, Path]:
    """``Odd`` of tests/plugins/odd_plugin.py (in-place add, reused module, structured outputs) with seeded
    weights (eval mode), and those weights as a safetensors file."""
    sys.path.insert(0, str(Path(__file__).parent / "plugins"))
    try:
        import odd_plugin
    finally:
        sys.path.pop(0)
    torch.manual_seed(seed)
    model = odd_plugin.Odd().eval()
    path = folder / f"odd-{seed}.safetensors"
    save_file(model.state_dict(), str(path))
    return model, path


def photo_batch(model: torch.nn.Module, photo: Path) -> torch.Tensor:
    """A photo through the model's own timm eval transform, as a batch of one."""
    config = resolve_data_config({}, model=model)
    return create_transform(**config, is_training=False)(Image.open(photo).convert("RGB")).unsqueeze(0)


def hand_hooks(
    model: torch.nn.Module, names: list[str], x: torch.Tensor
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Hand-written forward hooks: what they clone (right) and what they merely keep (the trap)."""
    copies: dict[str, torch.Tensor] = {}
    references: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(module: torch.nn.Module, args: object, output: torch.Tensor) -> None:
            copies[name] = output.detach().clone()
            references[name] = output

        return hook

    modules = dict(model.named_modules())
    handles = [modules[n].register_forward_hook(keep(n)) for n in names]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return copies, references


def hub_unreachable(tmp: Path) -> dict[str, str]:
    """An environment whose Hugging Face hub is a closed port on loopback (the connection is refused at once),
    not offline by HF_HUB_OFFLINE, no proxy; and a hub cache of its own in ``tmp/hub`` (empty until
    ``fill_hub_cache``)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE" and "proxy" not in k.lower()}
    return {**env, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp / "hub")}


def fill_hub_cache(tmp: Path, seed: int) -> torch.nn.Module:
    """``test_resnet``'s pretrained weights in ``tmp/hub``, the hub cache's own layout filled by hand
    (nothing downloaded): a seeded model, returned in eval mode."""
    torch.manual_seed(seed)
    model = timm.create_model("test_resnet").eval()
    repo, commit = tmp / "hub" / "models--timm--test_resnet.r160_in1k", "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    save_file(model.state_dict(), str(repo / "snapshots" / commit / "model.safetensors"))
    return model


def in_session(session: int) -> list[int]:
    """The live processes of a session (``start_new_session``: the first one's pid), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split(") ")[-1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] not in "ZX":
            found.append(int(stat.parent.name))
    return found
