"""Small datasets in the layouts ``capture`` reads where data lives, made from hookdump's bundled photo (no
download): six photos (the photo, mirrored, turned, cropped), written as

* ``OUT/train-000.tar`` .. ``train-002.tar``: webdataset shards, two samples each (``KEY.jpg``, ``KEY.cls``);
* ``OUT/photos.parquet``: a Parquet file, columns ``image`` (the JPEG bytes) and ``label`` (needs pyarrow,
  the data extra; skipped with a line saying so without it);
* ``OUT/classes/CLASS/*.jpg``: class folders (ImageFolder's layout).

    python scripts/sample_data.py OUT
"""

from __future__ import annotations

import io
import sys
import tarfile
from importlib import resources
from pathlib import Path

from PIL import Image, ImageOps


def photos() -> list[tuple[str, bytes, int]]:
    """(name, JPEG bytes, label) of six variants of the bundled photo."""
    with Image.open(str(resources.files("hookdump") / "data" / "sample.jpg")) as opened:
        photo = opened.convert("RGB")
    w, h = photo.size
    variants = {
        "cat": photo, "mirrored": ImageOps.mirror(photo), "flipped": ImageOps.flip(photo),
        "turned": photo.rotate(90, expand=True), "left": photo.crop((0, 0, w * 2 // 3, h)),
        "right": photo.crop((w // 3, 0, w, h)),
    }  # fmt: skip
    found = []
    for i, (name, image) in enumerate(variants.items()):
        data = io.BytesIO()
        image.save(data, format="JPEG", quality=90)
        found.append((name, data.getvalue(), i // 2))
    return found


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "sample-data")
    out.mkdir(parents=True, exist_ok=True)
    made = photos()
    for s in range(3):
        with tarfile.open(out / f"train-{s:03d}.tar", "w") as tar:
            for name, data, label in made[2 * s : 2 * s + 2]:
                for member, body in ((f"{name}.jpg", data), (f"{name}.cls", str(label).encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
    for name, data, label in made:
        folder = out / "classes" / f"class{label}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jpg").write_bytes(data)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print(
            f"wrote {out}/train-000..002.tar and {out}/classes/; no photos.parquet: pyarrow is not installed"
        )
        return
    table = pa.table({"image": [d for _, d, _ in made], "label": [label for _, _, label in made]})
    pq.write_table(table, out / "photos.parquet")
    print(f"wrote {out}/train-000..002.tar, {out}/photos.parquet and {out}/classes/")


if __name__ == "__main__":
    main()
