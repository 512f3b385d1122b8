"""A ``.npy`` file written batch by batch, so a capture over a whole dataset never holds it in memory.

The header is reserved up front and gets the final shape when the stream closes; the rows (batches
stacked along the first dimension) are appended as they come.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import LayerError
from .appendfile import AppendFile
from .npy import HEADER_BYTES


class NpyStream:
    """One captured tensor: ``append`` each batch, ``close``, then read it back with ``tensor()``."""

    def __init__(self, path: Path, name: str, direct: bool = True) -> None:
        self.path = path
        self.name = name
        self.rows = 0
        self.trailing: tuple[int, ...] | None = None
        self.dtype: torch.dtype | None = None
        self._file = AppendFile(path, create=True, direct=direct)
        with self._file.closed_on_error():
            self._file.append(bytes(HEADER_BYTES))

    @classmethod
    def reopen(
        cls, path: Path, name: str, state: dict[str, Any], size: int, direct: bool = True
    ) -> NpyStream:
        """Continue a stream an interrupted run left (``state()`` says how far it got, ``size``: the bytes of
        its header and those rows, checked held by the file): keep its rows, drop whatever of a later batch
        reached the file, append from there."""
        stream = cls.__new__(cls)
        stream.path, stream.name = path, name
        stream.rows = int(state["rows"])
        stream.trailing = tuple(state["trailing"])
        stream.dtype = getattr(torch, state["dtype"])
        stream._file = AppendFile(stream.path, create=False, direct=direct)
        with stream._file.closed_on_error():
            stream._file.truncate(size)  # only ever shorter: the file was checked to hold them all
        return stream

    def sync(self) -> None:
        """Make what was appended durable (before a checkpoint counts it): a power cut keeps it."""
        self._file.sync()

    def state(self) -> dict[str, Any]:
        """What ``reopen`` needs, as JSON."""
        return {
            "file": self.path.name,
            "rows": self.rows,
            "trailing": list(self.trailing or ()),
            "dtype": str(self.dtype or torch.float32).removeprefix("torch."),
        }

    def append(self, tensor: torch.Tensor) -> None:
        """Add a batch (a 0-d tensor counts as one row)."""
        rows = tensor.reshape(1) if tensor.dim() == 0 else tensor
        trailing = tuple(rows.shape[1:])
        if self.trailing is None:
            self.trailing, self.dtype = trailing, rows.dtype
        elif trailing != self.trailing or rows.dtype != self.dtype:
            raise LayerError(
                f"`{self.name}` gave {tuple(rows.shape)} {rows.dtype} in one batch and (N,"
                f" {', '.join(map(str, self.trailing))}) {self.dtype} in another: they cannot be stacked.",
                "Capture it with --batch-size 1 and inputs of one size, or capture another layer.",
            )
        self._file.append(_numpy(rows.contiguous()).data)  # in the file when this returns
        self.rows += rows.shape[0]

    @property
    def shape(self) -> list[int]:
        return [self.rows, *(self.trailing or ())]

    def close(self) -> None:
        """Write the header with the final shape; the file is then a valid ``.npy``."""
        if self._file.closed:
            return
        descr = np.lib.format.dtype_to_descr(_numpy(torch.empty(0, dtype=self.dtype or torch.float32)).dtype)
        header = repr({"descr": descr, "fortran_order": False, "shape": tuple(self.shape)}).encode("latin1")
        length = HEADER_BYTES - 10
        try:
            self._file.write_at(
                0, b"\x93NUMPY\x01\x00" + struct.pack("<H", length) + header.ljust(length - 1) + b"\n"
            )
        finally:  # closed even when the disk is full, so no descriptor is left open
            self._file.close()

    def tensor(self) -> torch.Tensor:
        """The whole stream as a tensor backed by the file (copy-on-write memory map)."""
        self.close()
        array = torch.from_numpy(np.load(self.path, mmap_mode="c"))
        return array.view(torch.bfloat16) if self.dtype == torch.bfloat16 else array


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """numpy has no bfloat16: its bits travel as int16 and are viewed back on reading."""
    return (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy()
