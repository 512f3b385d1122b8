"""The options of one capture, shared by the API that takes them and the manifest that records them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..store.folder import remote
from ..urls import is_url, plain


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture: every option of ``hookdump capture`` but the model, the inputs and the layers.

    Attributes:
        out: output folder, or a URL on object storage (``s3://bucket/acts``: written locally, then
            published, manifest last); ``overwrite`` replaces a capture already there.
        formats: ``npy``, ``pt``, ``safetensors``, ``zarr``.
        what: ``output``, ``input`` or ``both``.
        grad: also save the gradient of each captured output, for class ``target`` (default: top class).
        dtype: compute precision (autocast); ``save_dtype="keep"`` saves tensors in it instead of float32.
        early_stop: stop the forward pass once every wanted layer has run (never with ``grad``).
        save_dtype: ``float32``, ``float16``, ``bfloat16`` (not in .npy) or ``keep`` (as computed).
        reduce: ``none``, or pool each map at hook time: ``mean`` / ``max`` over space (or tokens), ``cls``.
        shard_size: safetensors shards of at most this size (``2GB``, ``500MB``, bytes); None: one file.
        zarr_chunk: the inputs in a chunk of ``tensors.zarr`` (along its first axis); None: ``batch_size``.
        max_queue_mb: the most the writer thread holds while the next batch runs, in MB (0: each batch on
            disk before the next one runs; None: 1/256 of the memory available at the start).
        workers: image-decoding worker processes (0: in process; None: a number that suits the machine).
        skip_bad: record unreadable images in the manifest and go on, instead of stopping.
        resume: continue the interrupted capture in ``out`` (same options, same inputs).
        shard: ``I/N``: capture only shard I of N of the inputs (whole batches), for ``hookdump merge``.
        attention: turn timm's fused attention off and save each attention module's weights as ``.attn``.
        compile: run the forward passes under ``torch.compile`` (``capture.compiled``): values equal eager
            ones to float rounding, not bit for bit; never with ``grad``, and the whole forward pass runs.
        png: draw each tensor's grid (and heat map over the first photo) beside it, once the capture is done.
    """

    out: Path | str = Path("hookdump-out")
    formats: tuple[str, ...] = ("npy",)
    what: str = "output"
    grad: bool = False
    target: int | None = None
    device: str = "auto"
    dtype: str = "float32"
    channels_last: bool = False
    save_dtype: str = "float32"
    batch_size: int = 16
    early_stop: bool = True
    overwrite: bool = False
    reduce: str = "none"
    shard_size: str | None = None
    zarr_chunk: int | None = None
    max_queue_mb: float | None = None
    workers: int | None = None
    skip_bad: bool = False
    resume: bool = False
    shard: str | None = None
    attention: bool = False
    compile: bool = False
    png: bool = False

    @property
    def folder(self) -> Path:
        """The local folder the capture is written to: ``out``, or for a URL its local mirror, from which it
        is published (``store/folder/remote.py``)."""
        if "\0" in str(self.out):
            shown = str(self.out).replace("\0", "\\0")
            raise UsageError(
                f"--out `{shown}` holds a NUL character, which no file system takes.", "Choose another --out."
            )
        return remote.mirror(self.out) if is_url(self.out) else Path(plain(str(self.out)))

    @property
    def url(self) -> str | None:
        """``out`` when it is a URL (a capture published to object storage), else None."""
        return self.out if isinstance(self.out, str) and is_url(self.out) else None
