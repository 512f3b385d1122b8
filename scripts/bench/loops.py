"""What people write, for the dataset benchmark: the bare forward, hand-written hooks, torchlens and the
seed's script, each run as a fresh process (``python loops.py --worker KIND ARGS``; ``KIND+``: with
hookdump's own process settings). Each writes the same spans as hookdump's breakdown where
``HOOKDUMP_PROFILE`` says."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import BinaryIO

import harness

TWINS, TWINS_LAYER = "twins_svt_large", "pos_block.3.proj.0"


def layer_names(modules: list[str], specs: list[str]) -> list[str]:
    """The modules that ``-l`` specs name (paths, globs such as ``blocks.*.*``), as hookdump reads them; a
    spec that names none stops the run (a hook on nothing would make the peer look free)."""
    from hookdump.patterns import match, normalize

    wanted: set[str] = set()
    for spec in specs:
        found = match(spec, modules)
        named = set(modules) & set([normalize(spec)] if found is None else found)
        if not named:
            raise SystemExit(f"loops.py: -l {spec} names no module of the model")
        wanted |= named
    return [name for name in modules if name in wanted]


def worker(kind: str, args: list[str]) -> None:
    """One case's work, in this fresh process."""
    import numpy as np
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    from hookdump.cli.process import give_back  # after each batch: nothing unless the process settings are on
    from hookdump.store.folder.profile import process_age

    imported, began = process_age(), time.perf_counter()

    if kind == "ckpt":  # the twins checkpoint, seeded weights
        from safetensors.torch import save_file

        torch.manual_seed(0)
        save_file({k: v.contiguous() for k, v in timm.create_model(TWINS).state_dict().items()}, args[0])
        return
    if kind == "seed":  # the seed's script, done right: eval, no_grad, a hook that clones
        from safetensors.torch import load_file

        ckpt, photo, out = args
        model = timm.create_model(TWINS)
        model.load_state_dict(load_file(ckpt))
        model.eval()
        transform = create_transform(**resolve_data_config({}, model=model), is_training=False)
        saved: list[torch.Tensor] = []
        module = dict(model.named_modules())[TWINS_LAYER]
        module.register_forward_hook(lambda m, a, o: saved.append(o.detach().clone()))
        with torch.no_grad():
            model(transform(Image.open(photo).convert("RGB")).unsqueeze(0))
        Path(out).mkdir(parents=True)
        np.save(Path(out) / f"{TWINS_LAYER}.npy", saved[0].numpy())
        return
    name, folder, out, batch, *names = args
    torch.manual_seed(0)
    if name.startswith("tv:"):  # torchvision's model, ImageNet's resize 256 and crop 224 (as hookdump's)
        import torchvision
        from torchvision import transforms as T

        model = torchvision.models.get_model(name[3:], weights=None).eval()
        mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
        transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(mean, std)])
    else:
        model = timm.create_model(name).eval()
        transform = create_transform(**resolve_data_config({}, model=model), is_training=False)
    paths = sorted(Path(folder).iterdir())
    size = int(batch)
    kept: dict[str, torch.Tensor] = {}
    files: dict[str, BinaryIO] = {}
    modules = dict(model.named_modules())
    cls = kind == "hand-cls"
    if kind in ("hand", "hand-cls"):
        names = layer_names(list(modules), names)
        for n in names:
            keep = (lambda o: o[:, 0].clone()) if cls else (lambda o: o.detach().clone())
            modules[n].register_forward_hook(lambda m, a, o, n=n, keep=keep: kept.__setitem__(n, keep(o)))
    if kind == "torchlens":
        import torchlens

    def save(start: int, outputs: dict[str, torch.Tensor]) -> None:
        for n, t in outputs.items():
            if n not in files:  # the .npy header holds the final shape, then each batch's rows follow
                files[n] = (Path(out) / f"{n}.npy").open("wb")
                header = {"descr": "<f4", "fortran_order": False, "shape": (len(paths), *t.shape[1:])}
                np.lib.format.write_array_header_2_0(files[n], header)
            t.numpy().tofile(files[n])

    if kind != "bare":
        Path(out).mkdir(parents=True)
    grad_off = torch.no_grad() if kind == "torchlens" else torch.inference_mode()
    spans = {"setup": time.perf_counter() - began, "decode": 0.0, "forward": 0.0}  # as hookdump's profile
    with grad_off:
        for start in range(0, len(paths), size):
            t0 = time.perf_counter()
            x = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths[start : start + size]])
            t1 = time.perf_counter()
            if kind == "torchlens":
                save(start, torchlens.extract(model, x, names))
            else:
                model(x)
                save(start, kept)
            spans["decode"] += t1 - t0
            spans["forward"] += time.perf_counter() - t1  # its hooks and saving too, where it has them
            give_back()
    for f in files.values():
        f.close()
    target = os.environ.get("HOOKDUMP_PROFILE")
    if target:  # the same spans as hookdump's breakdown, for the rows side by side
        extra = {"before run": imported} if imported is not None else {}
        Path(target).write_text(json.dumps({**spans, **extra, "run": time.perf_counter() - began}))


def main() -> None:
    found = harness.worker()
    if found is None:
        sys.exit(__doc__)
    kind, args = found
    tuned = kind.endswith("+")  # hookdump's own process settings (allocator.py, openmp.py, exit_now)
    if tuned:
        from hookdump.cli.process import keep_freed_memory, short_spin

        keep_freed_memory()
        short_spin()  # before torch is imported
    worker(kind.removesuffix("+"), args)
    if tuned:  # no interpreter teardown
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
