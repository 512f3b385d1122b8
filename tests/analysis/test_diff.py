"""`hookdump diff A B`: real captures of a seeded resnet18 (random weights, real photos) made by the console
script, one of them with one layer's weights moved by a known amount, one run in float16; every figure
checked against numpy on the saved files (``numpy.isclose``, the max of ``|a - b|``, the cosine formula)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import forkrun
import numpy as np
import pytest
import torch
from common import CHECKOUT, SKIMAGE_DATA, inputs_of
from helpers import seeded
from PIL import Image
from safetensors.torch import save_file

from hookdump.analysis.diff import diff

GOLDEN = CHECKOUT / "configs" / "golden-resnet18.toml"  # the layers, size, seed
SHIFT = (
    0.25  # added to layer3.1.bn1's bias: its output moves by exactly this, the layers before it not at all
)


def hd(*args: object) -> subprocess.CompletedProcess[str]:
    """The console script, forked from a server that imported it once (``forkrun``)."""
    return forkrun.run(args, timeout=600)


def capture(out: Path, photos: Path, *extra: object) -> Path:
    done = hd("capture", "--config", GOLDEN, photos, "-o", out, "-q", *extra)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """golden, moved (one bias shifted), half (float16 autocast, saved as float16)."""
    root = tmp_path_factory.mktemp("diff")
    photos = root / "photos"
    photos.mkdir()
    for name in ("chelsea", "coffee", "astronaut"):
        shutil.copy(SKIMAGE_DATA / f"{name}.png", photos / f"{name}.png")
    model, weights = seeded("resnet18", root, 0)
    state = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
    state["layer3.1.bn1.bias"] += SHIFT
    moved = root / "moved.safetensors"
    save_file(state, str(moved))
    return {
        "golden": capture(root / "golden", photos, "--checkpoint", weights),
        "moved": capture(root / "moved", photos, "--checkpoint", moved),
        "half": capture(
            root / "half", photos, "--checkpoint", weights, "--dtype", "float16", "--save-dtype", "float16"
        ),
    }  # fmt: skip


def _arrays(out: Path) -> dict[str, np.ndarray]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {Path(e["file"]).stem: np.load(out / e["file"]).astype(np.float64) for e in manifest["tensors"]}


def test_a_capture_against_itself_is_the_same_exit_0(runs: dict[str, Path]) -> None:
    done = hd("diff", runs["golden"], runs["golden"], "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert not found["differs"] and found["first_divergence"] is None
    assert [t["status"] for t in found["tensors"]] == ["same"] * 5
    assert all(t["max_abs"] == 0 and t["cosine"] == pytest.approx(1.0, abs=1e-12) for t in found["tensors"])
    manifest = json.loads((runs["golden"] / "manifest.json").read_text())  # the preset, as shipped
    assert [t["name"] for t in found["tensors"]] == ["conv1", "layer2", "layer3.1.bn1", "layer4", "fc"]
    assert [e["order"] for e in manifest["tensors"]] == [0, 1, 2, 3, 4] and found["order"] == "forward"
    assert (
        manifest["transform"]["input_size"] == [3, 128, 128] and manifest["model"]["timm_name"] == "resnet18"
    )


def test_one_moved_layer_is_the_first_divergence_by_the_amount_it_moved(runs: dict[str, Path]) -> None:
    done = hd("diff", runs["golden"], runs["moved"], "--json")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    assert found["differs"] and found["first_divergence"] == "layer3.1.bn1"
    by_name = {t["name"]: t for t in found["tensors"]}
    assert [by_name[n]["status"] for n in ("conv1", "layer2")] == ["same", "same"]
    shifted = by_name["layer3.1.bn1"]
    assert shifted["max_abs"] == pytest.approx(SHIFT, abs=1e-5) and shifted["out_of_tolerance"] == 1.0
    a, b = _arrays(runs["golden"]), _arrays(runs["moved"])
    assert np.abs(b["layer3.1.bn1"] - a["layer3.1.bn1"] - SHIFT).max() < 1e-5  # the oracle: the files
    for name, t in by_name.items():  # each figure against numpy on the whole files
        x, y = a[name], b[name]
        assert t["max_abs"] == pytest.approx(np.abs(x - y).max(), rel=1e-12, abs=0)
        assert t["out_of_tolerance"] == pytest.approx(1 - np.isclose(x, y).mean(), abs=1e-12)
        norm = np.sqrt((x * x).sum() * (y * y).sum())
        if norm:
            assert t["cosine"] == pytest.approx((x * y).sum() / norm, abs=1e-12)
        else:  # a map of zeros on one side (a ReLU's): undefined, so null
            assert t["cosine"] is None and (x == 0).all() != (y == 0).all()
        rel = np.abs(x - y)[y != 0] / np.abs(y[y != 0])
        assert t["max_rel"] == pytest.approx(rel.max(), rel=1e-9)
    text = hd("diff", runs["golden"], runs["moved"])
    assert text.returncode == 1 and "first divergence: layer3.1.bn1" in text.stdout.splitlines()[-1]
    assert text.stdout.splitlines()[3].split()[-1] == "differs"


def test_float16_against_float32_differs_until_the_tolerance_covers_it(runs: dict[str, Path]) -> None:
    a, b = _arrays(runs["golden"]), _arrays(runs["half"])
    strict = hd("diff", runs["golden"], runs["half"], "--json")
    assert strict.returncode == 1 and json.loads(strict.stdout)["first_divergence"] == "conv1"
    assert {t["dtype_b"] for t in json.loads(strict.stdout)["tensors"]} == {"float16"}
    worst = max(np.abs(a[n] - b[n]).max() for n in a)
    loose = hd("diff", runs["golden"], runs["half"], "--atol", worst * 1.001, "--rtol", "0", "--json")
    assert loose.returncode == 0, loose.stdout
    statuses = [t["status"] for t in json.loads(loose.stdout)["tensors"]]
    assert set(statuses) <= {"close", "same"} and statuses[0] == "close", statuses
    tight = hd("diff", runs["golden"], runs["half"], "--atol", worst * 0.999, "--rtol", "0", "--json")
    assert tight.returncode == 1
    names = [n for n in a if np.abs(a[n] - b[n]).max() > worst * 0.999]
    assert [t["name"] for t in json.loads(tight.stdout)["tensors"] if t["status"] == "differs"] == names


def test_chunks_give_the_same_figures_in_bounded_memory(runs: dict[str, Path]) -> None:
    whole = diff(runs["golden"], runs["half"])
    tracemalloc.start()
    chunked = diff(runs["golden"], runs["half"], chunk=4096)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    biggest = max(t.elements for t in whole.tensors) * 8  # conv1 in float64: 2.4 MB
    assert peak < biggest / 2, (peak, biggest)
    for x, y in zip(whole.tensors, chunked.tensors, strict=True):
        assert (x.max_abs, x.max_rel, x.out_of_tolerance) == (y.max_abs, y.max_rel, y.out_of_tolerance)
        assert x.cosine == pytest.approx(y.cosine, abs=1e-12)


def test_different_inputs_are_refused_with_why(runs: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other"  # as if its second photo had been another file: the manifest's sha256 says so
    shutil.copytree(runs["golden"], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["inputs"] = inputs_of(other)  # as a capture from before inputs.parquet kept them
    manifest["inputs"][1]["sha256"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    (other / "inputs.parquet").unlink()
    done = hd("diff", runs["golden"], other)
    assert done.returncode == 4 and done.stderr.startswith(
        "error: The two captures were not made from the same"
    )
    assert (
        "input 1 differs: " in done.stderr and "--allow-different-inputs" in done.stderr and not done.stdout
    )
    anyway = hd("diff", runs["golden"], other, "--allow-different-inputs", "--json")
    assert anyway.returncode == 0 and "note: --allow-different-inputs: input 1 differs" in anyway.stderr


def test_names_through_map_and_tensors_on_one_side(cli, runs: dict[str, Path], tmp_path: Path) -> None:
    renamed = (
        tmp_path / "renamed"
    )  # the same files under another naming (as the Twins repository's to timm's)
    shutil.copytree(runs["golden"], renamed)
    manifest = json.loads((renamed / "manifest.json").read_text())
    for entry in manifest["tensors"]:
        (renamed / entry["file"]).rename(renamed / f"model.{entry['file']}")
        entry["file"], entry["layer"] = f"model.{entry['file']}", f"model.{entry['layer']}"
    manifest["tensors"] = manifest["tensors"][:-1]  # fc on the golden side only
    (renamed / "manifest.json").write_text(json.dumps(manifest))
    unmapped = cli("diff", renamed, runs["golden"])
    assert unmapped.exit_code == 2 and "no tensor name in common" in unmapped.stderr
    mapped = hd("diff", renamed, runs["golden"], "--map", r"^model\.=", "--map", "nothing=here", "--json")
    assert mapped.returncode == 1, mapped.stderr  # fc is in B only
    found = json.loads(mapped.stdout)
    assert found["only_b"] == ["fc"] and found["first_divergence"] is None
    assert [t["other"] for t in found["tensors"]] == ["conv1", "layer2", "layer3.1.bn1", "layer4"]
    assert "note: --map `nothing=here` renamed no tensor" in mapped.stderr
    common = hd("diff", renamed, runs["golden"], "--map", r"^model\.=", "--only-common")
    assert common.returncode == 0, common.stdout
    assert "only in" in common.stdout and "note: --only-common: 1 tensor(s)" in common.stderr
    clash = cli("diff", renamed, runs["golden"], "--map", r"^model\.(conv1|layer2)$=conv1")
    assert clash.exit_code == 2 and "sends both" in clash.stderr


def test_an_unfinished_or_missing_capture_is_refused(cli, runs: dict[str, Path], tmp_path: Path) -> None:
    unfinished = tmp_path / "unfinished"
    shutil.copytree(runs["golden"], unfinished)
    manifest = json.loads((unfinished / "manifest.json").read_text())
    (unfinished / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    done = cli("diff", runs["golden"], unfinished, "--json")
    assert done.exit_code == 4 and "incomplete capture" in done.stderr and "--resume" in done.stderr
    assert json.loads(done.stdout)["kind"] == "input"
    missing = cli("diff", runs["golden"], tmp_path / "nope")
    assert missing.exit_code == 4 and "does not exist" in missing.stderr
    bad = cli("diff", runs["golden"], runs["golden"], "--map", "(=x")
    assert bad.exit_code == 2 and "is not a regex" in bad.stderr and "Traceback" not in bad.stderr
    negative = cli("diff", runs["golden"], runs["golden"], "--atol", "-1")
    assert negative.exit_code == 2 and "tolerances" in negative.stderr


def test_the_analysis_wing_never_imports_torch() -> None:
    code = (
        "import sys, pkgutil, importlib, hookdump.analysis as wing, hookdump.cli.app;"
        " names = [m.name for m in pkgutil.iter_modules(wing.__path__)];"
        " [importlib.import_module(f'hookdump.analysis.{n}') for n in names];"
        " print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
    assert torch.__version__  # the tests themselves use torch (the seeded weights)


# --- the first divergence in the order the modules ran -----------------------------------------------------


class Twisted(torch.nn.Module):
    """Modules defined in one order and run in another: ``early`` is defined after ``late`` and ``act`` but
    runs first, ``act`` runs twice (after ``early``, after ``late``)."""

    def __init__(self) -> None:
        super().__init__()
        self.late = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.act = torch.nn.ReLU()
        self.early = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.late(self.act(self.early(x))))
        return self.head(x.mean(dim=(2, 3)))


def _twisted(seed: int, nudge: float = 0.0) -> Twisted:
    torch.manual_seed(seed)
    net = Twisted().eval()
    with torch.no_grad():
        net.early.bias += nudge  # the later-defined, earlier-run module
    return net


def test_the_first_divergence_is_the_first_module_to_run_not_the_first_defined(tmp_path: Path) -> None:
    from torchvision import transforms as T

    from hookdump import api

    photos = [str(SKIMAGE_DATA / f"{n}.png") for n in ("chelsea", "coffee")]
    transform = T.Compose([T.Resize(24), T.CenterCrop(16), T.ToTensor()])
    layers = ["late", "act", "early", "head"]
    for name, net in (("a", _twisted(0)), ("b", _twisted(0, nudge=0.5))):
        api.capture(photos, layers, model=net, transform=transform, out=tmp_path / name)
    # the oracle: hooks of our own on the same module, in the order torch calls them
    ran: list[str] = []
    calls: dict[str, int] = {}
    net = _twisted(0)
    for layer in layers:

        def note(module: torch.nn.Module, args: object, out: object, layer: str = layer) -> None:
            calls[layer] = calls.get(layer, -1) + 1
            ran.append(f"{layer}@{calls[layer]}" if layer == "act" else layer)

        getattr(net, layer).register_forward_hook(note)
    with torch.no_grad():
        net(transform(Image.open(photos[0]).convert("RGB"))[None])
    assert ran == ["early", "act@0", "late", "act@1", "head"]
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    listed = [Path(e["file"]).stem for e in manifest["tensors"]]
    assert listed == ["late", "act@0", "act@1", "early", "head"]  # named_modules() order, then the calls
    assert [Path(e["file"]).stem for e in sorted(manifest["tensors"], key=lambda e: e["order"])] == ran
    done = hd("diff", tmp_path / "a", tmp_path / "b", "--json")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    assert found["first_divergence"] == "early" and found["order"] == "forward"
    assert {t["name"] for t in found["tensors"] if t["status"] == "differs"} == set(listed)  # all downstream
    assert [t["name"] for t in found["tensors"]] == listed  # the table keeps the manifest's order
    # a manifest without the order (as hookdump wrote them before): the manifest's order, said in a note
    for side in ("a", "b"):
        old = shutil.copytree(tmp_path / side, tmp_path / f"old-{side}")
        data = json.loads((old / "manifest.json").read_text())
        data["tensors"] = [{k: v for k, v in e.items() if k != "order"} for e in data["tensors"]]
        (old / "manifest.json").write_text(json.dumps(data))
    older = hd("diff", tmp_path / "old-a", tmp_path / "old-b", "--json")
    assert older.returncode == 1 and json.loads(older.stdout)["first_divergence"] == "late"
    assert json.loads(older.stdout)["order"] == "manifest" and "record no forward order" in older.stderr
    mixed = hd("diff", tmp_path / "old-a", tmp_path / "b", "--json")  # B's order serves
    assert json.loads(mixed.stdout)["first_divergence"] == "early" and "forward order" not in mixed.stderr
