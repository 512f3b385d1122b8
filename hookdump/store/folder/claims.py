"""What a command may write in a folder: the one check every command that writes goes through.

A file in the way may be replaced only when a hookdump record in that folder says hookdump wrote it: the
capture's ``manifest.json`` (its tensor files) or the folder's ``.hookdump-files.json``, which every other
writer (``show``, ``capture --png``, ``compare``, ``top``, ``report``) keeps, with each file's size and
sha256. Anything else in the way, a file changed since hookdump wrote it included, is refused before any
work, naming it (exit 2). Files are written beside their place and renamed in at the end
(:meth:`Claim.commit`), so a failure half way leaves the folder as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ...errors import UsageError
from ...failures import from_environment
from . import record
from .lock import check_free
from .manifest import below


def check_folder(folder: Path, option: str, elsewhere: str = "") -> None:
    """Refuse a folder nothing can be written to: a file, a ``..`` out of a folder that does not exist, an
    unwritable place, a virtual file system (/proc). ``option`` names the folder (``--out``); ``elsewhere``
    says how to write to another one (default: choose another ``option``)."""
    fix = _sentence(elsewhere or f"choose another {option}")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} `{folder}` is a file, not a folder.", fix)
    for i, part in enumerate(folder.parts):  # `new/..`: making the folder would make `new` too, inside it
        if part == ".." and not Path(*folder.parts[:i]).exists():
            raise UsageError(
                f"{option} `{folder}` steps back (`..`) out of `{Path(*folder.parts[:i])}`, which does not"
                " exist.",
                f"Give the folder without the detour: {option} {os.path.normpath(folder)}",
            )
    parent = next(p for p in [folder, *folder.absolute().parents] if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        if parent == folder:
            raise UsageError(f"{option} `{folder}` is not a writable folder.", fix)
        raise UsageError(f"{option} `{folder}` cannot be created: `{parent}` is not a writable folder.", fix)
    if os.statvfs(parent).f_blocks == 0:  # /proc, /sys and their kind: no disk behind them
        raise UsageError(
            f"{option} `{folder}` cannot be written: `{parent}` is on a virtual file system (like /proc or"
            " /sys), which holds no files.",
            fix if elsewhere else f"Choose {option} on a disk (e.g. ./acts).",
        )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def in_the_way(
    folder: Path, names: Iterable[str], command: str, elsewhere: str, ours: Iterable[str] = ()
) -> None:
    """Refuse, before any work, the first of ``names`` (``sub/`` a subfolder replaced whole) that is in
    ``folder`` and not hookdump's to replace: listed in the folder's record as written (``ours``: what the
    caller knows to be its own, e.g. a capture's files), else a user's file."""
    mine = set(record.recorded(folder)) | set(ours)
    for name in names:
        path = folder / name.rstrip("/")
        if name.endswith("/"):
            if path.exists() and not path.is_dir():
                refuse(path, command, elsewhere, "a file where it keeps a folder of its own")
            if path.is_dir() and not any(n.startswith(name) for n in mine):  # even empty: not hookdump's
                refuse(path, command, elsewhere, record.why(folder, name))
            for inner in sorted(path.rglob("*")) if path.is_dir() else []:
                rel = inner.relative_to(folder).as_posix()
                if not inner.is_dir() and rel not in mine:
                    refuse(inner, command, elsewhere, record.why(folder, rel))
        elif (path.exists() or path.is_symlink()) and name not in mine:
            refuse(path, command, elsewhere, record.why(folder, name))


def refuse(path: Path, command: str, elsewhere: str, reason: str) -> None:
    """The refusal of a file (or folder) in the way, naming it and what would have written it."""
    what = "a folder" if path.is_dir() and not path.is_symlink() else "a file"
    raise UsageError(
        f"`{path}` is in the way: hookdump {command} would write {what} of that name, {reason} (hookdump"
        " replaces only its own files).",
        _sentence(f"move it away, or {elsewhere}"),
    )


class Claim:
    """The files one command writes into ``folder``, checked before any work (:func:`claim`); each is
    staged beside its place (:meth:`stage`, :meth:`stage_folder`), and :meth:`commit` records the names, then
    renames them in. Leaving the ``with`` block without a commit removes what was staged."""

    def __init__(self, folder: Path, command: str, elsewhere: str) -> None:
        self.folder, self.command, self.elsewhere = folder, command, elsewhere
        self.staged: list[tuple[Path, str]] = []  # (scratch path, name in folder)

    def path(self, name: str) -> Path:
        return self.folder / name

    def stage(self, name: str, write: Callable[[Path], object]) -> Path:
        """``write(tmp)`` the file ``name`` beside its place; returns where it will be."""
        tmp = self.folder / f".hookdump-{os.getpid()}-{len(self.staged)}{Path(name).suffix}"
        self.staged.append((tmp, name))
        with self._writing():
            self.folder.mkdir(parents=True, exist_ok=True)
            write(tmp)
        return self.folder / name

    def stage_folder(self, name: str) -> Path:
        """A scratch folder to fill, that :meth:`commit` puts in place of the subfolder ``name`` whole."""
        tmp = self.folder / f".hookdump-{os.getpid()}-{len(self.staged)}.d"
        self.staged.append((tmp, name.rstrip("/") + "/"))
        with self._writing():
            tmp.mkdir(parents=True)
        return tmp

    def commit(self) -> list[Path]:
        """Record every staged name (before the renames: a kill between leaves names hookdump may replace),
        rename each into place, then record what each file now is."""
        if not self.staged:
            return []
        names = [self._files(tmp, name) for tmp, name in self.staged]
        with self._writing(), record.edit(self.folder) as files:
            for name in (n for group in names for n in group):
                files[name] = {"command": self.command}
        with self._writing():
            for tmp, name in self.staged:
                self._rename(tmp, name)
        with self._writing(), record.edit(self.folder) as files:
            for (_, name), group in zip(self.staged, names, strict=True):
                if name.endswith("/"):  # the old folder's files went with it
                    prefix = name
                    for gone in [n for n in files if n.startswith(prefix) and n not in group]:
                        del files[gone]
                for file in group:
                    files[file] = record.describe(self.folder / file, self.command)
        self.staged = []
        return [self.folder / name.rstrip("/") for group in names for name in group]

    def _files(self, tmp: Path, name: str) -> list[str]:
        if not name.endswith("/"):
            return [name]
        return sorted(name + p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())

    def _rename(self, tmp: Path, name: str) -> None:
        target = self.folder / name.rstrip("/")
        if not name.endswith("/"):
            os.replace(tmp, target)
            return
        old = self.folder / f".hookdump-{os.getpid()}-old.d"
        if target.exists():
            os.rename(target, old)
        try:
            os.rename(tmp, target)
        except OSError:
            if old.exists():
                os.rename(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)

    def discard(self) -> None:
        for tmp, _ in self.staged:
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
        self.staged = []

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A failure of the machine as its error paragraph, any other OSError one naming the folder."""
        try:
            yield
        except OSError as exc:
            raise from_environment(exc) or UsageError(
                f"Cannot write into `{self.folder}`: {exc}", _sentence(self.elsewhere)
            ) from exc

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def claim(
    folder: Path,
    names: Iterable[str],
    command: str,
    option: str,
    elsewhere: str = "",
    ours: Iterable[str] = (),
) -> Claim:
    """Check, before any work, that ``command`` may write ``names`` into ``folder`` (a writable folder, no
    capture writing there now, nothing of a user's in the way; ``ours``: what the caller knows to be its
    own), and return the :class:`Claim` to write them through. ``option`` names the folder (``--out``),
    ``elsewhere`` how to write to another one (default: choose another ``option``)."""
    elsewhere = elsewhere or f"choose another {option}"
    names = list(names)
    if not names:  # it writes nothing there: the folder is no business of its
        return Claim(folder, command, elsewhere)
    check_folder(folder, option, elsewhere)
    check_free(folder)  # a capture writing there now: refused, naming it
    in_the_way(folder, names, command, elsewhere, ours)
    return Claim(folder, command, elsewhere)


def remove(folder: Path, names: Iterable[str], listed_in: str = record.RECORD) -> None:
    """Remove hookdump's files ``names`` (``report/3.png``: in a subfolder, which goes too once empty) and
    take them out of the folder's record."""
    gone = [str(n) for n in names]
    for name in gone:
        path = below(folder, name, listed_in)
        path.unlink(missing_ok=True)
        for parent in path.relative_to(folder).parents[:-1]:  # report/inputs, then report
            with contextlib.suppress(OSError):
                (folder / parent).rmdir()
    if set(gone) & set(record.read(folder)):
        with Claim(folder, "", "")._writing(), record.edit(folder) as files:
            for name in gone:
                files.pop(name, None)
