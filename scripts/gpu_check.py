"""The GPU path, checked and measured in one run of a few minutes (issue 22): ``scripts/gpu_check.sh``.

Each part prints one line or a small table; a part that needs CUDA prints ``skipped (no CUDA device)``
when there is none, and the script still exits 0 (CI runs it on CPU with ``--quick``):

1. **CUDA equals CPU.** ``hookdump.api.capture`` of the same photos on the CPU and on CUDA, float32
   (max abs difference <= 1e-4 of the largest value) and ``--dtype bfloat16`` (<= 1e-2), read back with
   ``hookdump.open``. Without CUDA the CPU capture is compared with a second CPU capture decoded in
   process (``workers=0``): it must be bit-identical, which checks the comparison itself.
2. **Pinned memory and non-blocking copies that overlap the next forward.** A hand-written pattern (not
   in hookdump yet): each batch's activations copied on a side CUDA stream into pinned host buffers
   (``non_blocking=True``), waited for only when the next batch has been queued; against the blocking
   ``.to("cpu")`` that hookdump's hooks do now. CUDA events time both.
3. **Decoding on the GPU.** ``torchvision.io.decode_jpeg(device="cuda")`` of a batch of JPEGs against
   PIL's decode on the CPU (images/s). hookdump has no option for it: this measures first whether one
   would pay.
4. **The dataset benchmark at batch 256**: ``hookdump capture --device cuda --dtype bfloat16`` against a
   bare bf16 forward (autocast, ``inference_mode``, same photos and transform), in one process each;
   goal: hookdump's images/s >= 0.9x the bare forward's.

    python scripts/gpu_check.py [--quick] [--images 2048] [--batch 256]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SKIP = "skipped (no CUDA device)"


def photos(folder: Path, count: int) -> list[Path]:
    """``count`` JPEGs: the bundled photo and scikit-image's RGB photos, cycled (flipped on every second
    lap so no two files are the same bytes)."""
    from PIL import Image, ImageOps

    sources = [ROOT / "hookdump" / "data" / "sample.jpg"]
    spec = importlib.util.find_spec("skimage")
    if spec is not None and spec.origin is not None:
        data = Path(spec.origin).parent / "data"
        sources += [p for p in sorted(data.glob("*.png")) if Image.open(p).mode == "RGB"]
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(count):
        image = Image.open(sources[i % len(sources)]).convert("RGB")
        if (i // len(sources)) % 2:
            image = ImageOps.mirror(image)
        path = folder / f"img{i:05d}.jpg"
        image.save(path, quality=90)
        made.append(path)
    return made


def capture(paths: list[Path], layers: list[str], model: str, out: Path, **options: Any) -> dict[str, Any]:
    """hookdump's capture through the API, read back as numpy arrays (copied out of the memory maps)."""
    import numpy as np

    import hookdump
    from hookdump import api

    api.capture([str(p) for p in paths], layers, model=model, out=out, overwrite=True, **options)
    opened = hookdump.open(out)
    return {name: np.array(opened[name]) for name in opened}


def largest_error(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest abs difference over every tensor, relative to that tensor's largest abs value."""
    import numpy as np

    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    worst = 0.0
    for name in a:
        scale = max(float(np.abs(a[name]).max()), 1e-12)
        worst = max(worst, float(np.abs(a[name].astype(np.float64) - b[name]).max()) / scale)
    return worst


def equal_values(paths: list[Path], model: str, layers: list[str], work: Path, cuda: bool) -> bool:
    cpu = capture(paths, layers, model, work / "cpu", device="cpu", batch_size=8)
    if not cuda:
        again = capture(paths, layers, model, work / "cpu0", device="cpu", batch_size=8, workers=0)
        error = largest_error(cpu, again)
        print(f"1. CUDA equals CPU: {SKIP}; CPU against CPU decoded in process: {error:.1e} (must be 0)")
        return error == 0.0
    ok = True
    for dtype, limit in (("float32", 1e-4), ("bfloat16", 1e-2)):
        reference = cpu if dtype == "float32" else capture(
            paths, layers, model, work / "cpu-bf16", device="cpu", dtype=dtype, batch_size=8
        )  # fmt: skip
        gpu = capture(paths, layers, model, work / f"cuda-{dtype}", device="cuda", dtype=dtype, batch_size=8)
        error = largest_error(reference, gpu)
        ok &= error <= limit
        print(f"1. CUDA equals CPU, {dtype}: largest relative difference {error:.2e} (limit {limit:g}):"
              f" {'ok' if error <= limit else 'FAILED'}")  # fmt: skip
    return ok


def overlap(model_name: str, batch: int, cuda: bool) -> None:
    if not cuda:
        print(f"2. pinned memory + non-blocking copies on a side stream: {SKIP}")
        return
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model(model_name).cuda().eval()
    stages = [m for n, m in model.named_modules() if n in ("layer1", "layer2", "layer3", "layer4")]
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    side = torch.cuda.Stream()
    kept: list[torch.Tensor] = []

    def blocking(module: Any, args: Any, out: torch.Tensor) -> None:
        kept.append(out.to("cpu", copy=True))

    pinned: dict[int, torch.Tensor] = {}

    def overlapped(module: Any, args: Any, out: torch.Tensor) -> None:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            buffer = pinned.setdefault(id(module), torch.empty(out.shape, dtype=out.dtype, pin_memory=True))
            buffer.copy_(out, non_blocking=True)
            out.record_stream(side)
        kept.append(buffer)

    def timed(hook: Any, rounds: int = 10) -> float:
        handles = [m.register_forward_hook(hook) for m in stages]
        with torch.inference_mode():
            for _ in range(2):
                model(x)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(rounds):
                kept.clear()
                model(x)
                side.synchronize()  # the copies of this batch end while the next is queued
            torch.cuda.synchronize()
        for h in handles:
            h.remove()
        return (time.perf_counter() - start) / rounds

    bare = timed(lambda *a: None)
    sync, async_ = timed(blocking), timed(overlapped)
    print(f"2. per batch of {batch}: bare {bare * 1e3:.1f} ms, blocking .to('cpu') {sync * 1e3:.1f} ms"
          f" ({sync / bare:.2f}x), pinned + side stream {async_ * 1e3:.1f} ms"
          f" ({async_ / bare:.2f}x)")  # fmt: skip


def decode(paths: list[Path], cuda: bool) -> None:
    if not cuda:
        print(f"3. decode_jpeg(device='cuda'): {SKIP}")
        return
    import torch
    from PIL import Image
    from torchvision.io import decode_jpeg, read_file

    data = [read_file(str(p)) for p in paths]
    decode_jpeg(data[:2], device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    decode_jpeg(data, device="cuda")
    torch.cuda.synchronize()
    gpu = time.perf_counter() - start
    start = time.perf_counter()
    for p in paths:
        Image.open(p).convert("RGB").load()
    cpu = time.perf_counter() - start
    print(f"3. decode {len(paths)} JPEGs: GPU {len(paths) / gpu:.0f} images/s, PIL on one core"
          f" {len(paths) / cpu:.0f} images/s ({cpu / gpu:.1f}x)")  # fmt: skip


def dataset(paths: list[Path], batch: int, work: Path, cuda: bool) -> None:
    if not cuda:
        print(f"4. dataset benchmark at batch {batch}, bf16, against the bare bf16 forward: {SKIP}")
        return
    import subprocess

    hookdump = str(Path(sys.executable).with_name("hookdump"))
    folder = paths[0].parent
    layers = [x for n in range(1, 5) for x in ("-l", f"layer{n}")]
    hooked = [
        hookdump,
        "capture",
        "-m",
        "resnet50",
        *layers,
        str(folder),
        "--device",
        "cuda",
        "--dtype",
        "bfloat16",
        "--batch-size",
        str(batch),
        "-o",
        str(work / "ds"),
        "--quiet",
    ]
    bare = [sys.executable, __file__, "--bare", str(folder), str(batch)]
    times = {}
    for name, cmd in (("bare bf16 forward", bare), ("hookdump", hooked)):
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        times[name] = time.perf_counter() - start
        shutil.rmtree(work / "ds", ignore_errors=True)
    speed = {k: len(paths) / v for k, v in times.items()}
    ratio = speed["hookdump"] / speed["bare bf16 forward"]
    verdict = "met" if ratio >= 0.9 else "MISSED"
    print(
        f"4. {len(paths)} photos, batch {batch}: bare {speed['bare bf16 forward']:.0f} images/s,"
        f" hookdump {speed['hookdump']:.0f} images/s: {ratio:.2f}x (goal >= 0.9: {verdict})"
    )


def bare(folder: str, batch: int) -> None:
    """The bare bf16 forward over a folder, in its own process: DataLoader workers, pinned memory."""
    import timm
    import torch
    from timm.data import resolve_data_config

    from hookdump.inputs.loader import batches, default_workers

    torch.manual_seed(0)
    model = timm.create_model("resnet50").cuda().eval()
    config = resolve_data_config({}, model=model)
    paths = sorted(Path(folder).iterdir())
    with torch.inference_mode(), torch.autocast("cuda", torch.bfloat16):
        for b in batches(paths, config, batch, default_workers(len(paths), batch), pin_memory=True):
            assert b.tensor is not None
            model(b.tensor.cuda(non_blocking=True))
        torch.cuda.synchronize()


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--bare":
        bare(sys.argv[2], int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model and 4 photos (what CI runs on CPU)")
    parser.add_argument("--images", type=int, default=2048, help="photos of the dataset benchmark")
    parser.add_argument("--batch", type=int, default=256, help="batch of the dataset benchmark")
    args = parser.parse_args()
    import torch

    cuda = torch.cuda.is_available()
    where = torch.cuda.get_device_name(0) if cuda else "none: every CUDA part is skipped"
    print(f"torch {torch.__version__}, CUDA device: {where}")
    work = Path(tempfile.mkdtemp(prefix="hookdump-gpu-check-"))
    try:
        few = photos(work / "few", 4 if args.quick else 16)
        if args.quick:
            ok = equal_values(few, "test_resnet", ["layer1", "layer2", "layer3", "layer4"], work, cuda)
        else:
            ok = equal_values(few, "resnet50", ["layer1", "layer2", "layer3", "layer4"], work, cuda)
            ok &= equal_values(few, "vit_small_patch16_224", ["blocks.*"], work, cuda)
        overlap("test_resnet" if args.quick else "resnet50", 8 if args.quick else 64, cuda)
        decode(few, cuda)
        if not args.quick and cuda:
            dataset(photos(work / "many", args.images), args.batch, work, cuda)
        else:
            dataset(few, args.batch, work, cuda)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("gpu check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
