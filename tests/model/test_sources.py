"""Models from elsewhere (issue 20): torchvision's as ``tv:NAME`` through the real console script, and a
caller's own ``nn.Module`` through the Python API; checked against what is not hookdump's code:
torchvision's ``create_feature_extractor`` and its weights' own ``transforms()``, hand-written forward hooks,
autograd. Nothing is downloaded: random weights, or a checkpoint written here."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import forkrun
import numpy as np
import pytest
import torch
import torchvision
from common import CHECKOUT, SKIMAGE_DATA, paragraph, readme_commands, resumed_and_sharded
from helpers import Net, seeded_net, torchvision_input
from PIL import Image
from torch import nn
from torchvision import transforms as T
from torchvision.models.feature_extraction import create_feature_extractor

from hookdump import api
from hookdump.errors import HookdumpError, LayerError, UsageError
from hookdump.inputs.transforms import eval_transform
from hookdump.model.sources import module as module_source
from hookdump.model.sources import tv as torchvision_source

pytestmark = pytest.mark.model_source
# the layers of the shared capture: a module called twice (@0, @1), a glob, a leaf, the pool and the head
TV_LAYERS = ["layer1.0.relu", "layer*.0", "layer3.1.bn2", "avgpool", "fc"]
TV_STEMS = [
    "layer1.0.relu@0", "layer1.0.relu@1", "layer1.0", "layer2.0", "layer3.0", "layer4.0", "layer3.1.bn2",
    "avgpool", "fc",
]  # fmt: skip


def hd(*args: object, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, in ``cwd``."""
    return forkrun.run(args, cwd=cwd, env={**os.environ, **(env or {})})


def seeded_resnet18(seed: int) -> nn.Module:
    """torchvision's ResNet-18 with seeded weights and batch-norm statistics far from 0 and 1 (so that eval
    mode matters), in eval mode."""
    torch.manual_seed(seed)
    model = torchvision.models.resnet18(weights=None)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 1.5)
    return model.eval()


@pytest.fixture(scope="module")
def tv_run(tmp_path_factory: pytest.TempPathFactory, chelsea: Path) -> tuple[nn.Module, Path, str]:
    """One capture of tv:resnet18 by the console script, from a checkpoint written here, with --grad:
    (the model with those weights, the output folder, stderr)."""
    folder = tmp_path_factory.mktemp("tv")
    model = seeded_resnet18(7)
    checkpoint = folder / "resnet18.pth"
    torch.save(model.state_dict(), checkpoint)
    layers = [a for layer in TV_LAYERS for a in ("-l", layer)]
    done = hd("capture", "-m", "tv:resnet18", "--checkpoint", checkpoint, *layers, "--grad", chelsea,
              "-o", "out", cwd=folder)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return model, folder / "out", done.stderr


def _saved(out: Path, stem: str) -> torch.Tensor:
    return torch.from_numpy(np.load(out / f"{stem}.npy"))


# --- tv:NAME through the console script ----------------------------------------------------------------


def test_tv_capture_writes_every_file_and_records_its_source_and_transform(
    tv_run: tuple[nn.Module, Path, str],
) -> None:
    _, out, err = tv_run
    manifest = json.loads((out / "manifest.json").read_text())
    shapes = {t["file"]: t["shape"] for t in manifest["tensors"]}
    assert shapes["layer1.0.relu@1.npy"] == [1, 64, 56, 56] and shapes["layer4.0.npy"] == [1, 512, 7, 7]
    assert shapes["avgpool.npy"] == [1, 512, 1, 1] and shapes["fc.npy"] == [1, 1000]
    assert sorted(shapes) == sorted([f"{s}.npy" for s in TV_STEMS] + [f"{s}.grad.npy" for s in TV_STEMS])
    model = manifest["model"]
    assert model["source"] == "torchvision" and model["torchvision_name"] == "resnet18"
    assert model["timm_name"] is None and model["checkpoint"].endswith("resnet18.pth")
    assert model["checkpoint_sha256"] == hashlib.sha256(Path(model["checkpoint"]).read_bytes()).hexdigest()
    assert manifest["transform"] == {
        "input_size": [3, 224, 224], "resize": 256, "crop_pct": 0.875, "crop_mode": "center",
        "interpolation": "bilinear", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
        "from": "ImageNet defaults",
    }  # fmt: skip
    assert "note: transform: ImageNet's defaults (resize 256, center crop 224" in err
    assert "layer1.0.relu runs 2 times per forward" in err


def test_tv_capture_equals_torchvision_feature_extractor(
    tv_run: tuple[nn.Module, Path, str], chelsea: Path
) -> None:
    """torchvision's own graph extraction, its own transform, the same weights: equal to 1e-6."""
    model, out, _ = tv_run
    nodes = {"layer1.0.relu": "layer1.0.relu@0", "layer1.0.relu_1": "layer1.0.relu@1"}  # its 2nd call
    nodes |= {stem: stem for stem in TV_STEMS[2:]}
    with torch.no_grad():
        expected = create_feature_extractor(model, return_nodes=list(nodes))(torchvision_input(chelsea))
    diffs = []
    for node, stem in nodes.items():
        got = _saved(out, stem)
        torch.testing.assert_close(got, expected[node], atol=1e-6, rtol=0)
        diffs.append(float((got - expected[node]).abs().max()))
    print(f"tv:resnet18: {len(nodes)} tensors, max |diff| {max(diffs):.2e}")


def test_tv_gradients_are_autograds(tv_run: tuple[nn.Module, Path, str], chelsea: Path) -> None:
    """--grad: d(top score)/d(each output), against a hand-written hook and torch.autograd.grad."""
    model, out, _ = tv_run
    kept: dict[str, torch.Tensor] = {}
    handle = model.layer4[0].register_forward_hook(lambda m, i, o: kept.update({"layer4.0": o}))
    try:
        logits = model(torchvision_input(chelsea))
    finally:
        handle.remove()
    top = int(logits.argmax())
    (grad,) = torch.autograd.grad(logits[0, top], kept["layer4.0"])
    torch.testing.assert_close(_saved(out, "layer4.0.grad"), grad, atol=1e-6, rtol=0)
    assert torch.equal(_saved(out, "fc.grad"), torch.nn.functional.one_hot(torch.tensor([top]), 1000).float())


def test_show_and_report_read_a_tv_capture(tv_run: tuple[nn.Module, Path, str], chelsea: Path) -> None:
    _, out, _ = tv_run
    shown = hd("show", out, "--key", "layer2.0", "--overlay", chelsea, cwd=out.parent)
    assert shown.returncode == 0, shown.stderr
    assert "resized and center-cropped to 224x224 as the model's eval transform did" in shown.stdout
    assert Image.open(out / "layer2.0.overlay.png").size == (224, 224)
    report = hd("report", out, cwd=out.parent)
    assert report.returncode == 0, report.stderr
    page = (out / "index.html").read_text()
    assert "tv:resnet18" in page and "torchvision" in page and "layer1.0.relu@1" in page


def test_tv_list_modules_prints_named_modules_paths(tmp_path: Path, cli) -> None:
    listed = hd("list-modules", "tv:resnet18", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert list(rows) == [n for n, _ in torchvision.models.resnet18().named_modules() if n]
    assert rows["layer1.0.relu"]["calls"] == 2
    assert rows["layer1.0.conv1"]["output_shapes"] == [[1, 64, 56, 56]]
    assert all(row["fires"] and not row["container"] for row in rows.values())
    tree = cli("list-modules", "-m", "tv:resnet18", "--filter", "layer1.0.*")
    assert tree.exit_code == 0, tree.stderr
    assert "layer1.0.conv1  Conv2d  36.9K params  -> (1, 64, 56, 56)" in tree.stdout


def test_tv_resume_after_a_kill_gives_the_bytes_of_one_uninterrupted_run(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("chelsea.png", "coffee.png", "astronaut.png"):
        shutil.copy(SKIMAGE_DATA / name, photos / name)
    args = ("capture", "-m", "tv:resnet18", "--input-size", "3,64,64", "-l", "layer2", "-l", "fc", photos,
            "--batch-size", "1", "--seed", "3", "-o", "out")  # fmt: skip
    killed = hd(*args, cwd=tmp_path, env={"HOOKDUMP_TEST_KILL_AT": "checkpoint-1"})
    assert killed.returncode == -9, killed.stderr
    done = hd(*args, "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resumed after 1 of 3 images" in done.stderr
    # the uninterrupted run as a process of its own too: torch's thread count (one per test process under
    # pytest -n, the machine's in a console script) changes a convolution's last bits
    whole = hd(*args[:-1], "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    for stem in ("layer2", "fc"):
        assert (tmp_path / "out" / f"{stem}.npy").read_bytes() == (
            tmp_path / "whole" / f"{stem}.npy"
        ).read_bytes()
    transform = json.loads((tmp_path / "out" / "manifest.json").read_text())["transform"]
    assert transform["input_size"] == [3, 64, 64] and transform["resize"] == 73  # 64 / 0.875, as timm's


def test_tv_pretrained_offline_is_one_paragraph(tmp_path: Path, chelsea: Path) -> None:
    """No cached weights (an empty TORCH_HOME) and no way out (a proxy that refuses): exit 4, no traceback."""
    refuse = "http://127.0.0.1:9"
    env = {"TORCH_HOME": str(tmp_path / "torch"), "HTTPS_PROXY": refuse, "https_proxy": refuse,
           "NO_PROXY": "", "no_proxy": ""}  # fmt: skip
    done = hd("capture", "-m", "tv:resnet18", "--pretrained", "-l", "fc", chelsea, cwd=tmp_path, env=env)
    assert done.returncode == 4, done.stderr
    text = paragraph(done.stderr, "ResNet18_Weights.IMAGENET1K_V1", "--checkpoint", str(tmp_path / "torch"))
    assert done.stdout == "" and "Downloading" not in done.stderr, text  # torch.hub's line: on stdout


# --- tv:NAME: its weights' transforms, the refusals ------------------------------------------------------


@pytest.mark.parametrize("name", ["resnet50", "swin_t"])  # resize 232, crop 224; swin_t: bicubic
def test_the_transform_of_pretrained_weights_is_theirs_to_the_bit(name: str, chelsea: Path) -> None:
    """torchvision's weights' own transforms() on a real photo, against hookdump's from the data config."""
    spec = api.ModelSpec(f"tv:{name}", pretrained=True)
    config, notes = torchvision_source.transform(spec)
    weights = torchvision.models.get_model_weights(name).DEFAULT
    assert config["from"] == f"torchvision {weights}.transforms()" and not notes
    photo = Image.open(chelsea).convert("RGB")
    assert torch.equal(eval_transform(config)(photo), weights.transforms()(photo))


def test_tv_refusals_are_paragraphs_with_the_fix(cli, chelsea: Path, tmp_path: Path) -> None:
    unknown = cli("capture", "-m", "tv:resnet19", "-l", "fc", chelsea)
    assert unknown.exit_code == 4
    paragraph(unknown.stderr, "torchvision has no classification model `resnet19`", "tv:resnet18")
    detection = cli("list-modules", "tv:fasterrcnn_resnet50_fpn")
    assert detection.exit_code == 4
    paragraph(detection.stderr, "detection", "image classification")
    cls = cli("capture", "-m", "tv:resnet18", "-l", "layer4", "--reduce", "cls", chelsea)
    assert cls.exit_code == 2
    paragraph(cls.stderr, "--reduce cls", "Use --reduce mean")
    torch.save(torchvision.models.resnet34().state_dict(), tmp_path / "r34.pth")
    unfit = cli("capture", "-m", "tv:resnet18", "--checkpoint", tmp_path / "r34.pth", "-l", "fc", chelsea)
    assert unfit.exit_code == 4
    paragraph(unfit.stderr, "does not fit tv:resnet18", "unexpected")


def test_tv_random_weights_are_torchvisions_from_the_seed_and_reduce_mean_pools(
    chelsea: Path, tmp_path: Path
) -> None:
    spec = api.ModelSpec("tv:resnet18", seed=5)
    result = api.capture([str(chelsea)], ["layer3", "fc"], model=spec, out=tmp_path / "o", reduce="mean")
    torch.manual_seed(5)
    model = torchvision.models.resnet18(weights=None).eval()
    kept: dict[str, torch.Tensor] = {}

    def hook(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        kept["layer3"] = output.mean((2, 3))

    model.layer3.register_forward_hook(hook)
    with torch.no_grad():
        logits = model(torchvision_input(chelsea))
    torch.testing.assert_close(_saved(result.out, "layer3"), kept["layer3"], atol=1e-6, rtol=0)
    torch.testing.assert_close(_saved(result.out, "fc"), logits, atol=1e-6, rtol=0)
    assert any("random init from --seed 5" in note for note in result.notes)


# --- a caller's own nn.Module through the Python API -----------------------------------------------------


class NotOnMeta(Net):
    """Reads a value in its forward, which the meta device has none of: traced by a real CPU pass."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.abs().sum()) < 0:
            raise AssertionError("unreachable")
        return super().forward(x)


TRANSFORM = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])


def _state(net: nn.Module) -> dict[str, Any]:
    """Everything of a module a capture must leave as it was."""
    return {
        "tensors": {k: v.detach().clone() for k, v in net.state_dict().items()},
        "training": {n: m.training for n, m in net.named_modules()},
        "hooks": {
            n: [dict(getattr(m, h)) for h in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")]
            for n, m in net.named_modules()
        },
        "params": {n: (p.device, p.requires_grad) for n, p in net.named_parameters()},
    }


def _assert_untouched(net: nn.Module, before: dict[str, Any]) -> None:
    after = _state(net)
    assert after["tensors"].keys() == before["tensors"].keys()
    for key, tensor in before["tensors"].items():
        assert torch.equal(after["tensors"][key], tensor), key
    assert after["training"] == before["training"]
    assert after["hooks"] == before["hooks"]
    assert after["params"] == before["params"]


def _hand_hooks(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every call of every module of an eval copy of ``net``, cloned by hand-written hooks: ``name@k``."""
    model = copy.deepcopy(net).eval()
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Callable[[nn.Module, Any, torch.Tensor], None]:
        def hook(module: nn.Module, args: Any, output: torch.Tensor) -> None:
            calls = sum(k.startswith(f"{name}@") for k in seen)
            seen[f"{name}@{calls}"] = output.detach().clone()

        return hook

    for name, module in model.named_modules():
        if name:
            module.register_forward_hook(keep(name))
    with torch.no_grad():
        model(x)
    return seen


def test_a_module_capture_equals_hand_hooks_and_leaves_the_module_as_it_was(
    chelsea: Path, tmp_path: Path, cli
) -> None:
    net = seeded_net()
    before = _state(net)
    result = api.capture([str(chelsea)], ["act@1", "blocks.*", "bn", "head"], model=net, transform=TRANSFORM,
                         out=tmp_path / "out", grad=True)  # fmt: skip
    _assert_untouched(net, before)
    hand = _hand_hooks(net, TRANSFORM(Image.open(chelsea).convert("RGB")).unsqueeze(0))
    for stem, call in {"act@1": "act@1", "blocks.0": "blocks.0@0", "blocks.1": "blocks.1@0", "bn": "bn@0",
                       "head": "head@0"}.items():  # fmt: skip
        torch.testing.assert_close(_saved(result.out, stem), hand[call], atol=1e-6, rtol=0)
    assert (result.out / "act@1.grad.npy").is_file() and not (result.out / "act@0.npy").exists()
    manifest = json.loads((result.out / "manifest.json").read_text())
    model = manifest["model"]
    assert model["source"] == "module" and model["class"] == f"{Net.__module__}.Net" and model["seed"] is None
    assert model["state_dict_sha256"] == module_source.state_digest(net) == _digest(net)
    shown = hashlib.sha256(repr(TRANSFORM).encode()).hexdigest()[:16]  # Compose's repr names every step
    assert manifest["options"]["model"] == f"module:{Net.__module__}.Net@sha256:{_digest(net)[:16]}" + (
        f"+transform@sha256:{shown}"
    )
    assert manifest["transform"]["input_size"] == [3, 32, 32]
    assert manifest["transform"]["callable"].startswith("Compose(")
    shown = cli("show", result.out, "--key", "blocks.1", "--overlay", chelsea)  # its crop is not known
    assert shown.exit_code == 0 and "the capture's transform was the caller's own" in shown.stdout
    assert cli("report", result.out).exit_code == 0
    assert _digest(net) in (result.out / "index.html").read_text()


def _digest(net: nn.Module) -> str:
    """The documented recipe, written out: keys sorted; each key, dtype, shape and raw bytes."""
    digest = hashlib.sha256()
    for key, tensor in sorted(net.state_dict().items()):
        digest.update(f"{key}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_the_state_dict_sha256_tells_modules_apart(tmp_path: Path) -> None:
    def sha(net: nn.Module) -> str:
        found = api.plan(["head"], model=net, input_size=(3, 16, 16), out=tmp_path / "o")
        return str(found.model_record["state_dict_sha256"])

    one, two = seeded_net(seed=1), seeded_net(seed=1)
    assert sha(one) == sha(two)
    with torch.no_grad():
        two.head.bias[0] += 1e-3
    assert sha(one) != sha(two)


def test_a_module_is_untouched_after_an_error_and_after_an_interrupt(chelsea: Path, tmp_path: Path) -> None:
    net = seeded_net()
    before = _state(net)
    with pytest.raises(LayerError) as refused:  # a container: refused with its children
        api.capture([str(chelsea)], ["blocks"], model=net, transform=TRANSFORM, out=tmp_path / "a")
    assert "blocks.0, blocks.1" in refused.value.paragraph()
    _assert_untouched(net, before)

    def interrupted(done: int, total: int, written: int) -> None:
        raise KeyboardInterrupt  # after the first batch reached the disk, while the copy has its hooks on

    photos = [str(chelsea), str(SKIMAGE_DATA / "coffee.png")]
    with pytest.raises(KeyboardInterrupt):
        api.capture(photos, ["head"], model=net, transform=TRANSFORM, out=tmp_path / "b", grad=True,
                    batch_size=1, workers=0, on_batch=interrupted)  # fmt: skip
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["complete"] is False
    _assert_untouched(net, before)
    other = seeded_net()
    with torch.no_grad():
        other.head.bias[0] += 1.0
    again = dict(model=other, transform=TRANSFORM, out=tmp_path / "b", grad=True, batch_size=1, resume=True)
    with pytest.raises(UsageError, match=r"other options \(model: 'module:"):  # another module's weights
        api.capture(photos, ["head"], **again)
    wider = T.Compose([T.Resize(48), T.CenterCrop(32), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
    with pytest.raises(UsageError, match=r"other options \(model: 'module:.*\+transform@sha256:"):
        api.capture(photos, ["head"], **(again | {"model": net, "transform": wider}))  # another transform
    done = api.capture(photos, ["head"], **(again | {"model": net}))
    assert "resumed after 1 of 2 images" in done.notes


def test_a_module_without_a_transform_needs_a_pretrained_cfg(chelsea: Path, tmp_path: Path) -> None:
    net = seeded_net()
    with pytest.raises(UsageError) as missing:
        api.capture([str(chelsea)], ["head"], model=net, out=tmp_path / "a")
    assert "input size, mean, std" in missing.value.message and "transform=" in (missing.value.hint or "")
    with pytest.raises(UsageError, match="with its input size"):
        api.list_modules(net)
    tree = api.list_modules(net, input_size=(3, 16, 16))
    assert [m.name for m in tree.modules] == [n for n, _ in net.named_modules() if n]
    assert tree.inventory.get("blocks").container and tree.inventory.get("act").calls == 3
    assert tree.inventory.traced_on == "meta"  # a deep copy on meta: no weight was copied
    net.pretrained_cfg = {"input_size": (3, 24, 24), "mean": (0.4, 0.4, 0.4), "std": (0.2, 0.2, 0.2),
                          "crop_pct": 1.0, "interpolation": "bilinear"}  # fmt: skip
    result = api.capture([str(chelsea)], ["head"], model=net, out=tmp_path / "b")
    transform = json.loads(result.manifest.read_text())["transform"]
    assert transform["input_size"] == [3, 24, 24] and transform["mean"] == [0.4, 0.4, 0.4]


def test_a_module_that_cannot_run_on_meta_is_traced_on_a_copy_on_the_cpu(tmp_path: Path) -> None:
    net = seeded_net(kind=NotOnMeta)
    before = _state(net)
    tree = api.list_modules(net, input_size=(3, 16, 16))
    assert tree.inventory.traced_on == "cpu"
    assert any(note.startswith("traced with a real cpu pass") for note in tree.notes)
    _assert_untouched(net, before)


def test_a_module_refuses_other_weights(tmp_path: Path) -> None:
    with pytest.raises(HookdumpError, match="its own weights"):
        api.plan(
            ["head"], model=api.ModelSpec("x", pretrained=True, module=seeded_net()), input_size=(3, 8, 8)
        )


# --- the page's examples, as pasted ----------------------------------------------------------------------


def _section(page: Path, title: str) -> str:
    text = page.read_text()
    start = text.index(f"## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def test_the_models_from_elsewhere_examples_print_what_the_page_says(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/capture.md's "Models from elsewhere": each hookdump command run as pasted (but the offline
    --pretrained one, which a test above runs) prints the lines the page shows under it; the Python code
    (the `python -c` line, the Python block), run in a checkout's folder, prints what its comments say."""
    import re
    import shlex

    page = tmp_path / "page.md"
    page.write_text(_section(CHECKOUT / "docs" / "capture.md", "Models from elsewhere"))
    shutil.copytree(CHECKOUT / "hookdump" / "data", tmp_path / "hookdump" / "data")
    monkeypatch.chdir(tmp_path)
    for command, printed in readme_commands(page):
        if "--pretrained" in command:
            continue
        if command.startswith("python -c "):
            exec(shlex.split(command)[2], {})  # in this process: torch is imported already
            continue
        result = cli(*shlex.split(command)[1:])
        assert result.exit_code == 0, f"{command}\n{result.stderr}"
        for line in (p.removeprefix("#").strip() for p in printed if p.startswith("#   ")):  # output
            shown = line.removesuffix("...").strip()  # a line the page cut short: its start
            assert shown in result.stdout + result.stderr, f"{command}: {shown!r} not printed"
    (code,) = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    capsys.readouterr()
    exec(code, {})
    said = [c.split("# ", 1)[1] for c in code.splitlines() if c.startswith("print(")]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(said) and all(c.startswith(o) for o, c in zip(printed, said, strict=True)), (
        printed
    )


def test_tv_vit_feat_levels_and_reduce_cls_are_the_class_token(chelsea: Path, tmp_path: Path) -> None:
    """torchvision's ViT: feat:K is encoder layer K, --reduce cls its class token (position 0), both checked
    against create_feature_extractor on the same seeded weights; a ResNet's feat:K are its stages."""
    spec = api.ModelSpec("tv:vit_b_16", seed=3, model_args={"image_size": 32})
    small = api.InputSpec((str(chelsea),), input_size=(3, 32, 32))
    api.capture(
        small, ["feat:1", "encoder.layers.encoder_layer_11"], model=spec, out=tmp_path / "o", reduce="cls"
    )
    torch.manual_seed(3)
    net = torchvision.models.get_model("vit_b_16", weights=None, image_size=32).eval()
    layers = ["encoder.layers.encoder_layer_1", "encoder.layers.encoder_layer_11"]
    made = T.Compose(
        [
            T.Resize(36),
            T.CenterCrop(32),
            T.ToTensor(),
            T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    with torch.no_grad():
        expected = create_feature_extractor(net, return_nodes=layers)(
            made(Image.open(chelsea).convert("RGB"))[None]
        )
    for layer in layers:
        assert expected[layer].shape == (1, 5, 768)  # the class token and 2 x 2 patches
        got = np.load(tmp_path / "o" / f"{layer}.npy")
        np.testing.assert_allclose(got, expected[layer][:, 0].numpy(), rtol=0, atol=1e-4)
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["model"]["num_prefix_tokens"] == 1 and manifest["model"]["class_token"] is True
    stages = api.plan(["feat:*"], model="tv:resnet18", images=[str(chelsea)])
    assert [t.path for t in stages.targets] == ["layer1", "layer2", "layer3", "layer4"]


def test_tv_resume_and_shards_give_the_uninterrupted_values(chelsea: Path, tmp_path: Path) -> None:
    photos = [str(chelsea), str(SKIMAGE_DATA / "coffee.png"), str(SKIMAGE_DATA / "astronaut.png")]
    spec = api.ModelSpec("tv:resnet18", seed=3)
    small = api.InputSpec(tuple(photos), input_size=(3, 64, 64))
    api.capture(small, ["layer2"], model=spec, out=tmp_path / "whole", batch_size=1, workers=0)
    expected = np.load(tmp_path / "whole" / "layer2.npy")
    for how, got in resumed_and_sharded(spec, small, "layer2", tmp_path).items():
        np.testing.assert_array_equal(got, expected, err_msg=how)  # the same process: the same bits
