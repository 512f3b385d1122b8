"""What the user named (files, folders, globs, ``@list.txt``, tar shards, tables) to the list of input paths,
in a stable order and checked (``--skip-bad`` records the unreadable ones); ``--dry-run``'s decoding of them;
the notes on what the inputs' options did."""

from __future__ import annotations

import glob
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError
from ..model.sources.timm.names import ALIASES
from ..units import first_few
from ..urls import is_url, plain
from . import fetch, forks, parts, shards, tables
from .fetch import shown
from .images import check_image, load_formats, open_image
from .spec import InputSpec, sample_path
from .transforms import model_mode
from .walk import IMAGE_SUFFIXES, walk


def collect(
    spec: InputSpec,
    exclude: tuple[Path, ...] = (),
    skipped: list[dict[str, str]] | None = None,
    where: list[int] | None = None,
    notes: list[str] | None = None,
    unchanged: frozenset[str] = frozenset(),
) -> list[Path]:
    """Every image path the user named, in a stable order, checked (but those in ``unchanged``: decoded
    before and hashed the same since, by ``--resume``); folder walks never enter ``exclude`` (``notes``
    gets a line for each such folder that holds images).

    With ``skipped`` (``--skip-bad``), a file that is not a readable image is recorded there (path, reason)
    instead of stopping the run; ``where`` gets, for each, the number of images kept before it.
    """
    given = sum([bool(spec.paths), spec.sample, spec.random])
    if given == 0:
        raise UsageError(
            "No input given.",
            "Pass image files or folders, --sample for the bundled photo, or --random-input.",
        )
    if given > 1:
        raise UsageError("Give images, --sample or --random-input, not several.", "Keep one of them.")
    if spec.random:
        return []
    if spec.sample:
        return [sample_path()]
    skip = frozenset(p.resolve() for p in exclude)
    found: list[Path] = []
    left_out: list[Path] = []
    for text in spec.paths:
        found.extend(_expand(text, spec, skip, left_out))
    for folder in dict.fromkeys(left_out):
        if notes is not None and (count := len(walk(folder, frozenset(), []))):
            notes.append(
                f"the folder walk left out `{folder}`, the output folder (--out), and the {count} image(s) in"
                " it: captures are never read as inputs (pass such a file by its path to take it)"
            )

    def check(path: Path) -> None:
        if not unchanged or shown(path) not in unchanged:
            check_image(path, spec.image_part)

    kept = _kept(found, check, skipped, where)
    if found and not kept:
        raise none_readable(skipped or [])
    return kept


def decode_all(paths: list[Path], config: dict[str, Any], skipped: list[dict[str, str]] | None) -> list[Path]:
    """``--dry-run``: every input decoded as the run decodes it (a truncated file, a float image out of
    range refused, or with ``skipped`` recorded, the same way); the pixels are dropped."""
    mode, key = model_mode(config), config.get("image_key")
    kept = _kept(paths, lambda path: open_image(path, mode, image_key=key).close(), skipped)
    if paths and not kept:
        raise none_readable(skipped or [])
    return kept


def skipped_note(skipped: list[dict[str, str]], verb: str = "left out", said_in_manifest: bool = True) -> str:
    """``--skip-bad left out 2 unreadable input(s) (a.jpg, b.png); the manifest's `skipped` says why``: the
    first three named."""
    shown = first_few([s["path"] for s in skipped])
    why = "; the manifest's `skipped` says why" if said_in_manifest else ""
    return f"--skip-bad {verb} {len(skipped)} unreadable input(s) ({shown}){why}"


def _kept(
    paths: list[Path],
    check: Callable[[Path], None],
    skipped: list[dict[str, str]] | None,
    where: list[int] | None = None,
) -> list[Path]:
    """The paths that pass ``check`` (spread over processes when there are many: ``forks``); a failure
    raises, or with ``skipped`` is recorded there (and in ``where`` the number of paths kept before it)."""
    if forks.processes(len(paths)) > 1:
        load_formats()
    kept: list[Path] = []
    last = 0
    for index, exc in forks.failures(paths, check, first_only=skipped is None):
        if skipped is None or not isinstance(exc, InputError):
            raise exc
        kept += paths[last:index]
        skipped.append({"path": shown(paths[index]), "reason": exc.message})
        if where is not None:
            where.append(len(kept))
        last = index + 1
    return kept + paths[last:]


def none_readable(skipped: list[dict[str, str]]) -> InputError:
    """``--skip-bad`` left out every input: a capture of nothing must fail, as an empty folder does."""
    first = f" (`{skipped[0]['path']}`: {skipped[0]['reason']})" if skipped else ""
    return InputError(
        f"No image to capture: --skip-bad left out all {len(skipped)} input(s) as unreadable{first}.",
        "Fix or replace the inputs: --skip-bad leaves out some bad images, not all of them.",
    )


def _expand(
    text: str, spec: InputSpec, skip: frozenset[Path], left_out: list[Path], listed: bool = False
) -> list[Path]:
    text = plain(text)
    if is_url(text):
        return _remote(text, spec)
    kind = parts.named(text, listed)
    if kind is not None:  # tar shards, Parquet, a save_to_disk folder: each part, FILE::KEY, in order
        return kind.addresses(text, spec)
    if text.startswith("@"):
        return [
            item
            for line in _listed(text[1:])
            for item in (
                _expand(line, spec, skip, left_out, True)
                if is_url(line) or parts.named(line, True)
                else [Path(line)]
            )
        ]
    path = Path(text)
    if path.is_dir() and path.resolve() in skip:
        raise UsageError(
            f"--out `{text}` is the folder the inputs are read from: hookdump keeps its files apart from"
            " yours (and a later run would read its pictures as inputs).",
            "Choose another --out, e.g. a folder beside it.",
        )
    if path.is_dir():
        images = walk(path, skip, left_out)
        if not images:
            raise InputError(
                f"Folder `{path}` holds no images.", f"hookdump reads {', '.join(sorted(IMAGE_SUFFIXES))}."
            )
        return images
    if path.exists():
        return [path]
    if path.is_symlink():
        raise InputError(
            f"Input `{text}` is a symbolic link that leads nowhere (a loop, or its target is gone).",
            "Point the link at an image file, or pass the file itself.",
        )
    if set(text) & set("*?["):
        matches = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not matches:
            raise InputError(
                f"The pattern `{text}` matches no file.", "Check the pattern (quote it in the shell)."
            )
        return matches
    if _is_model_name(text):
        raise InputError(
            f"Input `{text}` does not exist: it is the name of a model, not an image.",
            f"Give the model with -m: hookdump capture -m {text} IMAGES... -l LAYER.",
        )
    raise InputError(f"Input `{text}` does not exist.", "Pass image files, folders, globs or @list.txt.")


def _listed(listing: str) -> list[str]:
    """The inputs an ``@list`` file names, a line each (``#`` a comment); a relative path is relative to
    the list's folder, or, for a list behind a URL, to the URL's."""
    if is_url(listing):
        file = fetch.fetch(fetch.expand(listing, "list file"))[0]
    else:
        file = Path(listing)
        if not file.is_file():
            raise InputError(f"List file `{listing}` does not exist.", "Write one image path a line in it.")
    lines = [ln.strip() for ln in file.read_text().splitlines()]
    names = [ln for ln in lines if ln and not ln.startswith("#")]
    if not names:
        raise InputError(f"List file `{listing}` holds no images.", "Write one image path a line in it.")
    if is_url(listing):
        base = listing.rpartition("/")[0]
        return [n if is_url(n) or n.startswith("/") else f"{base}/{n}" for n in names]
    return [n if Path(n).exists() or Path(n).is_absolute() else str(file.parent / n) for n in names]


def _remote(url: str, spec: InputSpec) -> list[Path]:
    """The inputs a URL names, fetched into the local cache (``fetch``): its images, and each tar shard's
    samples or table's rows (a kind of ``parts`` by the object's name)."""
    objects = fetch.listed(url)
    kinds = [parts.named(name, True) for name, _ in objects]
    wanted = [
        (o, k)
        for o, k in zip(objects, kinds, strict=True)
        if k or Path(o[0]).suffix.lower() in IMAGE_SUFFIXES
    ]
    if not wanted:
        raise InputError(
            f"`{url}` holds no images (nor tar shards, nor Parquet files).",
            f"hookdump reads {', '.join(sorted(IMAGE_SUFFIXES))}, .tar and .parquet.",
        )
    local = fetch.fetch([o for o, _ in wanted])
    return [
        part
        for path, (_, kind) in zip(local, wanted, strict=True)
        for part in (kind.addresses(str(path), spec) if kind else [path])
    ]


def _is_model_name(text: str) -> bool:
    """Whether ``text`` names a timm model (or a Twins alias), as people pass it to list-modules."""
    import timm

    if text.startswith("tv:"):  # torchvision's, as -m tv:NAME takes them
        return text[3:].isidentifier()
    return "/" not in text and (text in ALIASES or timm.is_model(text))


def option_notes(paths: list[Path], spec: InputSpec) -> list[str]:
    """What the inputs' options did: the image column chosen for a table, an option no input used."""
    notes = tables.note_columns(paths, spec.image_column)
    if spec.image_key and not any(shards.is_part(p) for p in paths):
        notes.append("--image-key is ignored: no input is a sample of a tar shard")
    columns = (("--image-column", spec.image_column), ("--label-column", spec.label_column))
    unused = [option for option, value in columns if value]
    if unused and not any(tables.is_part(p) for p in paths):
        notes.append(f"{' and '.join(unused)} ignored: no input is a row of a Parquet or datasets table")
    return notes
