"""What the console script does to its own process, through the real ``hookdump`` executable: malloc keeps
freed memory for the next batch, OpenMP's idle threads spin less, the checkpoint is hashed while torch
imports, and the exit skips the interpreter's teardown but still flushes every output and runs the
``atexit`` work."""

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
from safetensors.torch import save_file

from hookdump import allocator, digest, openmp

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
        if k not in (*allocator.USER_SETTINGS, "GLIBC_TUNABLES", *openmp.USER_SETTINGS)
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


LIBGOMP = sys.platform.startswith("linux") and "libgomp" in Path("/proc/self/maps").read_text()


@pytest.mark.skipif(not LIBGOMP, reason="GOMP_SPINCOUNT is GNU OpenMP's; this torch does not use it")
def test_openmp_threads_spin_less_unless_the_user_set_it(tmp_path: Path, chelsea: Path) -> None:
    def spin_count(env: dict[str, str]) -> str:
        """What libgomp itself says it read, when the capture process loaded it (OMP_DISPLAY_ENV)."""
        done = _probe_capture(tmp_path, "-l", "0", chelsea, "-o", tmp_path / "out", "--overwrite",
                              env={"OMP_DISPLAY_ENV": "VERBOSE", **env})  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr.split("GOMP_SPINCOUNT = '")[1].split("'")[0]

    assert spin_count({}) == openmp.SPIN_COUNT == "10000"
    assert spin_count({"GOMP_SPINCOUNT": "300000"}) == "300000"  # the user's choice is kept
    assert spin_count({"OMP_WAIT_POLICY": "ACTIVE"}) != openmp.SPIN_COUNT
    plain = {k: v for k, v in os.environ.items() if k not in openmp.USER_SETTINGS}
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
