"""What the console script does to its own process, through the real ``hookdump`` executable: malloc keeps
freed memory within a batch and gives it back after it (the peak does not grow with the images), OpenMP's
idle threads spin less, the checkpoint is hashed while torch imports, and the exit skips the interpreter's
teardown but still flushes every output and runs the ``atexit`` work."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from common import SKIMAGE_DATA
from PIL import Image
from safetensors.torch import save_file

from hookdump import digest
from hookdump.cli import process

EXE = shutil.which("hookdump", path=str(Path(sys.executable).parent))

#: A plugin that writes, when the capture process imports it, whether glibc's malloc served a 64 MB block
#: from the heap (by default such a block is a fresh mmap, counted in mallinfo2's ``hblks``), and registers
#: an atexit function that leaves a file behind (proof that the atexit work still runs).
PROBE = """
import atexit, ctypes, os
from pathlib import Path

import numpy as np
from timm.models import register_model
from torch import nn

folder = Path(os.environ["PROBE_DIR"])


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
before = mallinfo2().hblks
block = np.ones(64 << 20, dtype=np.uint8)
(folder / "malloc.txt").write_text("mmap" if mallinfo2().hblks > before else "heap")
del block
atexit.register(lambda: (folder / "atexit.txt").write_text("ran"))


@register_model
def probe_net(pretrained=False, **kwargs):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
"""


def _probe_capture(tmp_path: Path, *args: str | Path, env: dict[str, str] | None = None):
    """``hookdump capture`` of ``probe_net`` with ``args``, the probe writing into ``tmp_path/probe``;
    malloc's and OpenMP's own variables are left out of the environment unless ``env`` sets them."""
    (tmp_path / "probe").mkdir(exist_ok=True)
    (tmp_path / "probe_plugin.py").write_text(PROBE)
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in (*process.MALLOC_SETTINGS, "GLIBC_TUNABLES", *process.OPENMP_SETTINGS)
    }
    environment |= {"PROBE_DIR": str(tmp_path / "probe"), **(env or {})}
    return subprocess.run(
        [EXE, "capture", "--import", str(tmp_path / "probe_plugin.py"), "-m", "probe_net", *map(str, args)],
        capture_output=True, text=True, env=environment, timeout=300,
    )  # fmt: skip


def _capture(tmp_path: Path, *inputs: str | Path, env: dict[str, str] | None = None) -> Path:
    """Capture ``probe_net``'s layer 0 over ``inputs`` (batches of 2, --json); the probe's folder."""
    done = _probe_capture(
        tmp_path, "-l", "0", *inputs, "--batch-size", "2", "-o", tmp_path / "out", "--overwrite", "--json",
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)  # all of stdout came out before the fast exit
    assert manifest["complete"] is True
    return tmp_path / "probe"


GLIBC = sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")


@pytest.mark.skipif(not GLIBC, reason="the malloc settings are glibc's")
def test_malloc_keeps_freed_memory_unless_the_user_set_it(
    tmp_path: Path, photos: Path, chelsea: Path
) -> None:
    assert (_capture(tmp_path, photos) / "malloc.txt").read_text() == "heap"
    assert (_capture(tmp_path, chelsea) / "malloc.txt").read_text() == "heap"
    user = _capture(tmp_path, chelsea, env={"MALLOC_MMAP_MAX_": "65536"})  # the user's choice is kept
    assert (user / "malloc.txt").read_text() == "mmap"
    library = tmp_path / "library.py"  # the library, so a user's own process, leaves malloc alone
    library.write_text(PROBE.replace("import atexit,", "import hookdump.api, atexit,"))
    done = subprocess.run([sys.executable, str(library)], env={**os.environ, "PROBE_DIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "malloc.txt").read_text() == "mmap"


def _small_photos(folder: Path, count: int) -> Path:
    """``count`` images: 64 real photos (scikit-image's, flipped and turned, 64 x 64 so that decoding is
    cheap) cycled, as hard links."""
    folder.mkdir()
    turns = [
        None,
        Image.Transpose.FLIP_LEFT_RIGHT,
        Image.Transpose.FLIP_TOP_BOTTOM,
        Image.Transpose.ROTATE_180,
    ]
    photos = [p for p in sorted(SKIMAGE_DATA.glob("*.png")) if Image.open(p).mode in ("RGB", "L")]
    for i in range(64):
        image = Image.open(photos[i % len(photos)]).convert("RGB").resize((64, 64))
        (image if turns[i // len(photos)] is None else image.transpose(turns[i // len(photos)])).save(
            folder / f"{i:05d}.png"
        )
    for i in range(64, count):
        (folder / f"{i:05d}.png").hardlink_to(folder / f"{i % 64:05d}.png")
    return folder


def _peak_rss_mb(tmp_path: Path, images: Path) -> float:
    """Peak RSS (MB, of the capture process or a worker if larger: ``wait4``'s ``ru_maxrss``) of the real
    console script capturing efficientnet_lite0's ``conv_stem`` (25.7 MB a batch of 16) over ``images``."""
    out = tmp_path / "out"
    environment = {
        k: v for k, v in os.environ.items() if k not in (*process.MALLOC_SETTINGS, "GLIBC_TUNABLES")
    }
    with (tmp_path / "stderr.txt").open("w+") as log:
        child = subprocess.Popen(
            [EXE, "capture", "-m", "efficientnet_lite0", "-l", "conv_stem", str(images), "--batch-size", "16",
             "-o", str(out), "-q"],
            env=environment, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, (tmp_path / "stderr.txt").read_text()
    shutil.rmtree(out)  # a few GB
    return usage.ru_maxrss / 1024


@pytest.mark.skipif(not GLIBC, reason="the malloc settings are glibc's")
def test_peak_memory_does_not_grow_with_the_number_of_images(tmp_path: Path) -> None:
    """With the heap kept and never trimmed (issue 23) the peak grew with the images as the heap
    fragmented: 930-960 MB over 64 images, 1350-1770 MB over 2,048; given back after each batch, 930 MB
    at both."""
    few = _peak_rss_mb(tmp_path, _small_photos(tmp_path / "few", 64))
    many = _peak_rss_mb(tmp_path, _small_photos(tmp_path / "many", 2048))
    assert many <= 1.15 * few, f"peak RSS {few:.0f} MB over 64 images, {many:.0f} MB over 2,048"


LIBGOMP = sys.platform.startswith("linux") and "libgomp" in Path("/proc/self/maps").read_text()


@pytest.mark.skipif(not LIBGOMP, reason="GOMP_SPINCOUNT is GNU OpenMP's; this torch does not use it")
def test_openmp_threads_spin_less_unless_the_user_set_it(tmp_path: Path, chelsea: Path) -> None:
    def spin_count(env: dict[str, str]) -> str:
        """What libgomp itself says it read, when the capture process loaded it (OMP_DISPLAY_ENV)."""
        done = _probe_capture(tmp_path, "-l", "0", chelsea, "-o", tmp_path / "out", "--overwrite",
                              env={"OMP_DISPLAY_ENV": "VERBOSE", **env})  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr.split("GOMP_SPINCOUNT = '")[1].split("'")[0]

    assert spin_count({}) == process.SPIN_COUNT == "10000"
    assert spin_count({"GOMP_SPINCOUNT": "300000"}) == "300000"  # the user's choice is kept
    assert spin_count({"OMP_WAIT_POLICY": "ACTIVE"}) != process.SPIN_COUNT
    plain = {k: v for k, v in os.environ.items() if k not in process.OPENMP_SETTINGS}
    library = subprocess.run(  # the library, so a user's own process, keeps libgomp's default
        [sys.executable, "-c", "import hookdump.api, torch; torch.ones(8).sum()"],
        env={**plain, "OMP_DISPLAY_ENV": "VERBOSE"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "GOMP_SPINCOUNT = '300000'" in library.stderr, library.stderr


def test_the_exit_still_runs_atexit_work_and_keeps_the_exit_code(tmp_path: Path, chelsea: Path) -> None:
    probe = _capture(tmp_path, chelsea)
    assert (probe / "atexit.txt").read_text() == "ran"
    failed = _probe_capture(tmp_path, "-l", "nope", chelsea, "-o", tmp_path / "out2")
    assert failed.returncode == 3, failed.stderr  # a layer that does not exist: the documented code
    assert "nope" in failed.stderr and "Traceback" not in failed.stderr


def test_a_prefetched_hash_is_the_file_s_hash_and_never_stale(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(3 << 20))
    digest.prefetch(path)
    assert digest.sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    digest.prefetch(path)
    time.sleep(0.01)
    path.write_bytes(b"changed after the hash started")  # another size: the prefetched hash is not used
    assert digest.sha256(path) == hashlib.sha256(b"changed after the hash started").hexdigest()
    digest.prefetch(tmp_path / "missing.bin")  # nothing to hash: no error here ...
    digest.prefetch(None)
    with pytest.raises(FileNotFoundError):  # ... the usual one where the hash is asked for
        digest.sha256(tmp_path / "missing.bin")


def test_the_manifest_records_the_checkpoint_hash_hashed_in_the_background(
    tmp_path: Path, chelsea: Path
) -> None:
    torch.manual_seed(3)
    weights = {"0.weight": torch.randn(4, 3, 3, 3), "0.bias": torch.randn(4)}
    checkpoint = tmp_path / "probe.safetensors"
    save_file(weights, str(checkpoint))
    done = _probe_capture(
        tmp_path, "-l", "0", "--checkpoint", checkpoint, chelsea, "-o", tmp_path / "out", "--json"
    )
    assert done.returncode == 0, done.stderr
    expected = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert json.loads(done.stdout)["model"]["checkpoint_sha256"] == expected
