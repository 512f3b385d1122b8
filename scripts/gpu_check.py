"""The GPU path, checked and measured in one run of a few minutes (issue 22): ``scripts/gpu_check.sh``.

Each part prints one line or a small table; a part that needs CUDA prints ``skipped (no CUDA device)``
when there is none, and the script still exits 0 (CI runs it on CPU with ``--quick``):

1. **CUDA equals CPU.** ``hookdump.api.capture`` of the same photos on the CPU and on CUDA, float32
   (max abs difference <= 1e-4 of the largest value) and ``--dtype bfloat16`` (<= 1e-2), read back with
   ``hookdump.open``; resnet50 and ViT-B/16 (``vit_base_patch16_224``). Without CUDA the CPU capture is
   compared with a second CPU capture decoded in process (``workers=0``): it must be bit-identical, which
   checks the comparison itself.
2. **The capture against its slowest part (issue 46).** ``hookdump capture --device cuda --dtype
   bfloat16 --save-dtype float16`` at batch 256 (its copies land in pinned buffers on a side stream,
   ``capture/landing.py``) against each part alone: the bf16 forward, the device-to-host copy of what it
   captures, the write of it to ``.npy``; for resnet50 (layer1-4) and ViT-B/16 (12 blocks); goal: >= 0.8x
   the slowest part's images/s.
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


MODELS_46 = {
    "resnet50": [f"layer{n}" for n in range(1, 5)],
    "vit_base_patch16_224": [f"blocks.{n}" for n in range(12)],
}


def rounds(work: Any, n: int = 5) -> float:
    """Seconds per call of ``work`` (CUDA synchronized), after one warm-up call; the median of ``n``."""
    import statistics

    import torch

    work()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        work()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def parts(name: str, layers: list[str], batch: int, work: Path) -> dict[str, float]:
    """Seconds per batch of each part of a capture alone: the bf16 forward (autocast, inference_mode, the
    input on the device), the device-to-host copy of the layers' outputs into pinned buffers, and their write
    to ``.npy`` streams (hookdump's own, direct I/O) as float16; and the bytes a batch captures."""
    import timm
    import torch

    from hookdump.store.formats.npystream import NpyStream

    torch.manual_seed(0)
    model = timm.create_model(name).cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    seen: list[torch.Tensor] = []
    modules = dict(model.named_modules())
    with torch.inference_mode(), torch.autocast("cuda", torch.bfloat16):
        forward = rounds(lambda: model(x))
        handles = [modules[n].register_forward_hook(lambda m, a, out: seen.append(out)) for n in layers]
        try:
            model(x)
        finally:
            for handle in handles:
                handle.remove()
        sources = [t.to(torch.float16) for t in seen]
    pinned = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in sources]
    copy = rounds(lambda: [b.copy_(t, non_blocking=True) for b, t in zip(pinned, sources, strict=True)])

    def write() -> None:
        streams = [NpyStream(work / f"part-{i}.npy", str(i)) for i in range(len(pinned))]
        for stream, buffer in zip(streams, pinned, strict=True):
            stream.append(buffer)
        for stream in streams:
            stream.close()

    written = rounds(write, 3)
    for leftover in work.glob("part-*.npy"):
        leftover.unlink()
    return {"forward": forward, "copy": copy, "write": written, "bytes": sum(t.nbytes for t in sources)}


def against_parts(paths: list[Path], batch: int, work: Path, cuda: bool) -> bool:
    """Issue 46: ``hookdump capture --device cuda --dtype bfloat16 --save-dtype float16`` at ``batch``
    against the slowest of its parts alone, for resnet50 (layer1-4) and ViT-B/16 (its 12 blocks); goal: the
    capture's images/s >= 0.8x the slowest part's. The capture's time is its loop and the writer's drain
    (``HOOKDUMP_PROFILE``): model load and commit left out, decoding waits left in (printed)."""
    if not cuda:
        print(f"2. the capture against min(bf16 forward, device-to-host copy, disk write): {SKIP}")
        return True
    import json
    import os
    import subprocess

    hookdump = str(Path(sys.executable).with_name("hookdump"))
    ok = True
    for name, layers in MODELS_46.items():
        alone = parts(name, layers, batch, work)
        profile, out = work / "profile.json", work / "cap"
        wanted = [x for n in layers for x in ("-l", n)]
        command = [hookdump, "capture", "-m", name, *wanted, str(paths[0].parent), "--device", "cuda",
                   "--dtype", "bfloat16", "--save-dtype", "float16", "--batch-size", str(batch),
                   "-o", str(out), "--overwrite", "-q"]  # fmt: skip
        subprocess.run(command, check=True, env={**os.environ, "HOOKDUMP_PROFILE": str(profile)})
        spent = json.loads(profile.read_text())
        manifest = json.loads((out / "manifest.json").read_text())
        shutil.rmtree(out)
        seconds = spent["loop"] + spent.get("writer drain", 0.0)
        speed = len(paths) / seconds
        part_speed = {part: batch / alone[part] for part in ("forward", "copy", "write")}
        slowest = min(part_speed, key=lambda part: part_speed[part])
        ratio = speed / part_speed[slowest]
        ok &= ratio >= 0.8
        queue = manifest["writer_queue"]
        print(f"2. {name}, batch {batch}, {alone['bytes'] / 2**20:.0f} MB a batch: alone (images/s)"
              f" " + ", ".join(f"{p} {v:.0f}" for p, v in part_speed.items()) +
              f"; capture {speed:.0f} images/s ({spent.get('decode', 0.0):.1f} s of it waiting for decoding):"
              f" {ratio:.2f}x the {slowest} (goal >= 0.8: {'met' if ratio >= 0.8 else 'MISSED'});"
              f" cuda_max_memory_allocated {manifest['cuda_max_memory_allocated'] / 2**20:.0f} MB, buffers"
              f" made {queue['buffers_made']}, reused {queue['buffers_reused']}")  # fmt: skip
    return ok


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
            ok &= equal_values(few, "vit_base_patch16_224", ["blocks.*"], work, cuda)
        many = photos(work / "many", args.images) if not args.quick and cuda else few
        ok &= against_parts(many, args.batch, work, cuda)
        decode(few, cuda)
        dataset(many, args.batch, work, cuda)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("gpu check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
