"""Inputs where they live (issue 38): a capture from webdataset tar shards against the same photos as files
(the baseline), and against the floor, a plain PIL + ``torch.utils.data`` loop over the same shards; whole
command against whole command, side by side in one run.

The photos are scikit-image's RGB and grayscale photos cycled to ``--images`` (as the dataset benchmark
makes them), written once as files and once as ``--shards`` tar shards in webdataset's layout (``KEY.png``
and ``KEY.cls``). Each case is a fresh process, the cases take turns round by round (this machine is shared
and noisy: read the ratios), and the script prints medians:

* ``files``: ``hookdump capture -m resnet18 -l layer4 --reduce mean FOLDER --batch-size 64`` (default
  workers);
* ``tar``: the same command on ``'shards/train-{000..N}.tar'``;
* ``floor``: the plain loop: an ``IterableDataset`` that walks the shards' members with ``tarfile`` (each
  worker its own shards), PIL decodes, timm's eval transform, the model under ``inference_mode`` with one
  forward hook that keeps ``layer4``'s mean, ``np.save`` at the end.

Goal: ``tar / files`` <= 1.05 in wall time. The inputs' records' cost (``--records``, ``--preflight``,
``--marginal``) is ``records.py``. ``--quick``: 16 photos in 2 shards, batch 8, one round.

    .venv/bin/python scripts/bench/inputs.py [--images 512] [--shards 8] [--rounds 3] [--batch 64]
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import harness
from photos import photos


def floor(args: list[str]) -> None:
    """The floor: a plain loop over the shards, in this process and its DataLoader workers."""
    import numpy as np
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    shards, out, batch = [Path(a) for a in args[0].split(",")], Path(args[1]), int(args[2])
    torch.manual_seed(0)
    model = timm.create_model("resnet18").eval()
    transform = create_transform(**resolve_data_config({}, model=model), is_training=False)

    class Samples(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            info = get_worker_info()
            mine = shards if info is None else shards[info.id :: info.num_workers]
            for shard in mine:
                with tarfile.open(shard) as tar:
                    for member in tar:
                        if member.name.endswith(".png"):
                            data = tar.extractfile(member).read()  # type: ignore[union-attr]
                            yield transform(Image.open(io.BytesIO(data)).convert("RGB"))

    kept: list[torch.Tensor] = []
    model.layer4.register_forward_hook(lambda m, i, o: kept.append(o.mean((2, 3)).clone()))
    loader = DataLoader(Samples(), batch_size=batch, num_workers=1)
    with torch.inference_mode():
        for x in loader:
            model(x)
    np.save(out, torch.cat(kept).numpy())


def make_shards(folder: Path, images: Path, count: int) -> list[Path]:
    """The photos of ``images`` in ``count`` tar shards, in order, each sample ``KEY.png`` + ``KEY.cls``."""
    files = sorted(images.iterdir())
    folder.mkdir()
    shards = []
    for s in range(count):
        shard = folder / f"train-{s:03d}.tar"
        with tarfile.open(shard, "w") as tar:
            for i, photo in list(enumerate(files))[s * len(files) // count : (s + 1) * len(files) // count]:
                for name, data in ((f"{i:06d}.png", photo.read_bytes()), (f"{i:06d}.cls", b"0")):
                    member = tarfile.TarInfo(name)
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
        shards.append(shard)
    return shards


def main() -> None:
    if found := harness.worker():
        return floor(found[1])
    options = harness.parser(__doc__, rounds=3)
    options.add_argument("--images", type=int, default=512)
    options.add_argument("--shards", type=int, default=8)
    options.add_argument("--batch", type=int, default=64)
    args = harness.parse(options, quick={"images": 16, "shards": 2, "batch": 8, "rounds": 1})
    with harness.workdir("hookdump-bench-inputs-") as work:
        images = photos(work / "photos", args.images)
        shards = make_shards(work / "shards", images, args.shards)
        brace = work / "shards" / f"train-{{000..{args.shards - 1:03d}}}.tar"
        common = ["-m", "resnet18", "-l", "layer4", "--reduce", "mean", "--batch-size", args.batch, "-q"]
        plain = harness.me(__file__, "floor", ",".join(map(str, shards)), work / "floor.npy", args.batch)
        commands = {
            "files": ([harness.HOOKDUMP, "capture", *common, images, "-o", work / "out"], work / "out"),
            "tar": ([harness.HOOKDUMP, "capture", *common, brace, "-o", work / "out"], work / "out"),
            "floor": (plain, None),
        }

        def case(cmd: list[object], out: Path | None) -> harness.Run:
            run = harness.process(cmd, out=out)
            run.figures["images/s"] = args.images / run.wall
            return run

        results = harness.rounds({name: lambda c=c: case(*c) for name, c in commands.items()}, args.rounds)
    notes = [harness.goal(results, "tar", "files", "<=", 1.05),
             f"tar / floor = {harness.ratio(results, 'tar', 'floor'):.2f}"]  # fmt: skip
    title = f"{args.images} photos in {args.shards} shards, batch {args.batch}"
    harness.table(title, results, "files", [harness.Column("images/s", "images/s", digits=1)], notes)


if __name__ == "__main__":
    main()
