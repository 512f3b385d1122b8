"""The appendable file under every stream: every byte lands where it belongs whether it went direct (past the
page cache) or through it (on disk, on tmpfs, which may or may not take O_DIRECT), and a direct file really
stays out of the page cache."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hookdump.store.formats import appendfile
from hookdump.store.formats.appendfile import AppendFile

DIRECT_FILE_SYSTEMS = ("ext2/ext3", "xfs", "btrfs")  # `stat -f -c %T` names; all of them do O_DIRECT
SHM = Path("/dev/shm")


def _file_system(path: Path) -> str:
    found = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return found.stdout.strip()


def _takes_direct(folder: Path) -> bool:
    """Whether files in ``folder`` are on a file system known to write O_DIRECT (never a fall-back)."""
    return bool(appendfile.DIRECT) and _file_system(folder) in DIRECT_FILE_SYSTEMS


def _needs_direct(folder: Path) -> None:
    if not _takes_direct(folder):
        pytest.skip("no O_DIRECT file system under the test folder")


def _chunks(sizes: list[int]) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]


# unaligned sizes, exact blocks, and one that fills the staging buffer more than once
SIZES = [512, 0, 1, 4095, 4096, 5000, 0, appendfile.STAGING + 3, 7, 3 * appendfile.BLOCK]


def _folder(where: str, tmp_path: Path) -> Path:
    if where == "tmpfs":
        if not SHM.is_dir() or _file_system(SHM) != "tmpfs":
            pytest.skip("no tmpfs at /dev/shm")
        folder = SHM / f"hookdump-test-{os.getpid()}-{tmp_path.name}"
        folder.mkdir()
        return folder
    return tmp_path


@pytest.mark.parametrize(("where", "direct"), [("disk", True), ("disk", False), ("tmpfs", True)])
def test_every_appended_byte_is_in_the_file_direct_or_not(where: str, direct: bool, tmp_path: Path) -> None:
    folder = _folder(where, tmp_path)
    try:
        path = folder / "stream.npy"
        expected = b""
        file = AppendFile(path, create=True, direct=direct)
        for chunk in _chunks(SIZES):
            file.append(chunk)
            expected += chunk
            assert path.read_bytes() == expected  # at every step: what a checkpoint would trust
            assert file.size == len(expected)
        if direct and _takes_direct(folder):
            assert file.direct  # every block went direct, no fall-back
        elif not direct:
            assert not file.direct
        file.write_at(0, b"HEADER")
        expected = b"HEADER" + expected[6:]
        file.truncate(9000)  # as a resume drops a batch that reached the file only in part
        expected = expected[:9000]
        file.close()
        file.close()  # idempotent
        assert path.read_bytes() == expected

        # --resume: the partial block is read back, then appended to
        again = AppendFile(path, create=False, direct=direct)
        for chunk in _chunks([10, 8000]):
            again.append(chunk)
            expected += chunk
        again.write_at(3, b"!")
        expected = expected[:3] + b"!" + expected[4:]
        again.close()
        assert path.read_bytes() == expected
    finally:
        if folder != tmp_path:
            for child in folder.iterdir():
                child.unlink()
            folder.rmdir()


def test_a_block_size_the_file_system_refuses_falls_back_to_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened direct but a write refused (EINVAL, as for a disk with larger blocks): the rest goes cached."""
    _needs_direct(tmp_path)
    monkeypatch.setattr(appendfile, "BLOCK", 1000)  # no disk has 1000-byte blocks: the kernel says EINVAL
    path = tmp_path / "stream.npy"
    file = AppendFile(path, create=True)
    assert file.direct
    chunks = _chunks([3000, 5000])
    for chunk in chunks:
        file.append(chunk)
    assert not file.direct
    file.close()
    assert path.read_bytes() == b"".join(chunks)


def _cached_pages(path: Path) -> float:
    """The share of ``path``'s pages in the page cache (``mincore``), without reading them."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    with path.open("rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
        address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        vector = (ctypes.c_ubyte * pages)()
        assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) == 0, ctypes.get_errno()
        resident = sum(v & 1 for v in vector)
    return resident / pages


def test_a_direct_file_stays_out_of_the_page_cache(tmp_path: Path) -> None:
    _needs_direct(tmp_path)
    data = _chunks([32 << 20])[0]
    shares = {}
    for direct in (True, False):
        path = tmp_path / f"direct-{direct}.npy"
        file = AppendFile(path, create=True, direct=direct)
        file.append(data)
        file.close()
        shares[direct] = _cached_pages(path)
    assert shares[True] < 0.05  # at most the last, partial block went through the cache
    assert shares[False] > 0.9


def test_a_capture_to_npy_leaves_its_files_out_of_the_page_cache_and_one_read_back_in_it(
    cli, tmp_path: Path
) -> None:
    """Streams that only become .npy files go direct; with .pt they are read back at once, so cached."""
    _needs_direct(tmp_path)
    shares = {}
    for formats in ("npy", "npy,pt"):
        out = tmp_path / formats.replace(",", "-")
        args = ("capture", "-m", "resnet18", "--random-input", "-l", "layer1", "--format", formats, "-o", out)
        result = cli(*args)
        assert result.exit_code == 0, result.stderr
        assert np.load(out / "layer1.npy", mmap_mode="r").shape == (1, 64, 56, 56)
        shares[formats] = _cached_pages(out / "layer1.npy")
    assert shares["npy"] < 0.05
    assert shares["npy,pt"] > 0.9
