"""Independent oracles and seeded models shared by the tests: nothing here calls hookdump. Seeded timm models
and a caller's own module, photos through timm's and torchvision's transforms, layers hooked by hand, a hub
cache filled by hand, and the math captures are checked against (softmax of q k, CKA, timm's feature
layout, the grey levels of a drawn tile)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import timm
import torch
import torchvision
from PIL import Image
from safetensors.torch import save_file
from timm.data import create_transform, resolve_data_config
from torch import nn

IMAGENET_CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat


def seeded(name: str, folder: Path, seed: int) -> tuple[torch.nn.Module, Path]:
    """A timm model with seeded random weights (eval mode), and those weights as a safetensors file."""
    torch.manual_seed(seed)
    model = timm.create_model(name).eval()
    path = folder / f"{name}-{seed}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model, path


def seeded_pth(name: str, folder: Path, seed: int) -> tuple[torch.nn.Module, Path]:
    """A timm model with seeded random weights, saved with ``torch.save`` (CoaT's blocks share tensors with
    the model, which safetensors refuses)."""
    torch.manual_seed(seed)
    model = timm.create_model(name).eval()
    path = folder / f"{name}-{seed}.pth"
    torch.save(model.state_dict(), path)
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


def torchvision_input(photo: Path) -> torch.Tensor:
    """The photo through torchvision's own ResNet-18 eval transform (resize 256, crop 224: ImageNet's)."""
    made = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.transforms()
    return made(Image.open(photo).convert("RGB")).unsqueeze(0)


def hooked(name: str, layers: list[str], photo: Path) -> dict[str, np.ndarray]:
    """The layers' outputs for the photo, from the model capture builds for --seed 0, hooked by hand."""
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    seen: dict[str, np.ndarray] = {}

    def keep(layer: str):
        def hook(module: torch.nn.Module, args: object, out: torch.Tensor) -> None:
            seen[layer] = out.detach().clone().numpy()

        return hook

    handles = [model.get_submodule(layer).register_forward_hook(keep(layer)) for layer in layers]
    try:
        with torch.no_grad():
            model(photo_batch(model, photo))
    finally:
        for handle in handles:
            handle.remove()
    return seen


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


class Net(nn.Module):
    """A small CNN with a container (a ModuleList, never called), a module called three times, and
    batch norm (whose statistics a pass in train mode would change)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.ModuleList([nn.Conv2d(8, 8, 3, padding=1) for _ in range(2)])
        self.act = nn.ReLU()
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.stem(x))
        for block in self.blocks:
            x = self.act(block(x))
        return self.head(self.bn(x).mean((2, 3)))


def seeded_net(seed: int = 0, kind: type[Net] = Net) -> Net:
    """A seeded ``Net`` in a state worth keeping: train mode but one block in eval, a frozen weight, odd
    batch-norm statistics, and hooks of its own (forward, forward-pre, full backward)."""
    torch.manual_seed(seed)
    net = kind().train()
    net.blocks[0].eval()
    net.stem.weight.requires_grad_(False)
    net.bn.running_mean.uniform_(-0.5, 0.5)
    net.head.register_forward_hook(lambda m, i, o: None)
    net.stem.register_forward_pre_hook(lambda m, i: None)
    net.bn.register_full_backward_hook(lambda m, gi, go: None)
    return net


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def q_k(qkv: np.ndarray, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """timm's split of a qkv projection (B, N, 3*C) into q, k of (B, heads, N, head_dim)."""
    b, n, _ = qkv.shape
    parts = qkv.reshape(b, n, 3, heads, -1).transpose(2, 0, 3, 1, 4)
    return parts[0].astype(np.float64), parts[1].astype(np.float64)


def base_key(key: str, base: dict[str, torch.Tensor]) -> str:
    """The base model's key for a features model's key: ``model.`` dropped, ``layers_0`` -> ``layers.0``."""
    key = key.removeprefix("model.")
    head, _, rest = key.partition(".")
    candidates = [key] + [f"{head[:i]}.{head[i + 1 :]}.{rest}" for i, c in enumerate(head) if c == "_"]
    found = [c for c in candidates if c in base]
    assert found, f"no base weight for {key}"
    return found[0]


def as_map(captured: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """The captured tensor in timm's layout, from the shapes alone: tokens (N, L, C) lose their leading
    extra tokens and become (N, C, H, W); anything else must already match."""
    if captured.ndim == 3 and expected.ndim == 4:
        n, c, h, w = expected.shape
        return captured[:, captured.shape[1] - h * w :].reshape(n, h, w, c).permute(0, 3, 1, 2)
    return captured


def centre(k: np.ndarray) -> np.ndarray:
    n = len(k)
    h = np.eye(n) - np.ones((n, n)) / n
    return h @ k @ h


def hsic_biased(k: np.ndarray, m: np.ndarray) -> float:
    return float(np.trace(k @ centre(m))) / (len(k) - 1) ** 2


def hsic_unbiased(k: np.ndarray, m: np.ndarray) -> float:
    """Song et al. 2012, eq. 5, term by term with the diagonals zeroed."""
    n = len(k)
    k, m = k - np.diag(np.diag(k)), m - np.diag(np.diag(m))
    one = np.ones(n)
    terms = np.trace(k @ m) + (one @ k @ one) * (one @ m @ one) / ((n - 1) * (n - 2))
    return float(terms - 2 / (n - 2) * (one @ k @ m @ one)) / (n * (n - 3))


def cka_numpy(x: np.ndarray, y: np.ndarray, unbiased: bool = True) -> float:
    x, y = x.reshape(len(x), -1).astype(np.float64), y.reshape(len(y), -1).astype(np.float64)
    k, m = x @ x.T, y @ y.T
    h = hsic_unbiased if unbiased else hsic_biased
    return h(k, m) / np.sqrt(h(k, k) * h(m, m))


def levels(a: np.ndarray) -> np.ndarray:
    """The grey levels a tile of ``a`` is drawn in: its range stretched onto 0..255."""
    return np.round((a - a.min()) / (a.max() - a.min()) * 255)
