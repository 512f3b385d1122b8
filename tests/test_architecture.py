"""The house keeps its shape: wings import only the wings below them, no module imports itself round a
cycle, and an import inside a function is there for speed and says so. Read from the package's source with
``ast`` (every import counts: at module level, inside functions, under ``TYPE_CHECKING``).

The wings, bottom to top (docs/architecture.md): the ground (``errors``, ``units``, ``patterns``,
``failures``, ``digest``, ``version``, ``urls``, ``urlfailures``), then ``model``, ``inputs``, ``store``,
``capture``; ``pictures``, ``analysis`` and ``report`` read the store (the report also draws ``analysis``'
sections); ``api`` (with the package's ``__init__``) over them all, ``cli`` at the top.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hookdump"
GROUND = {"errors", "units", "failures", "digest", "version", "patterns", "urls", "urlfailures"}
MAY_IMPORT: dict[str, set[str]] = {
    "ground": set(),
    "model": {"ground"},
    "inputs": {"ground", "model"},
    "store": {"ground", "model", "inputs"},
    "capture": {"ground", "model", "inputs", "store"},
    "pictures": {"ground", "inputs", "store"},
    "analysis": {"ground", "inputs", "store", "pictures"},
    "report": {"ground", "inputs", "store", "pictures", "analysis"},
    "api": {"ground", "model", "inputs", "store", "capture", "pictures", "analysis", "report"},
    "cli": {"ground", "model", "inputs", "store", "capture", "pictures", "analysis", "report", "api"},
}


@dataclass(frozen=True)
class Import:
    """One intra-package import: from module ``source`` (its file, its line) of ``names`` in ``target``."""

    source: str
    target: str
    names: tuple[str, ...]
    file: str
    target_file: str
    line: int
    in_function: bool
    commented: bool


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name (``hookdump.store.folder.reader``; a package is its ``__init__``) to file."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(package: Path) -> list[Import]:
    """Every import of one package module by another, resolved to the module it names."""
    known = modules(package)
    found = []
    for name, path in known.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        inside = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            for n in ast.walk(f)
        }
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
                module = ".".join([*base, node.module] if node.module else base)
                pairs = [
                    (f"{module}.{a.name}", (a.name,)) for a in node.names if f"{module}.{a.name}" in known
                ]
                rest = tuple(a.name for a in node.names if f"{module}.{a.name}" not in known)
                pairs += [(module, rest)] if rest and module in known else []
            elif isinstance(node, ast.Import):
                pairs = [(a.name, ()) for a in node.names if a.name in known]
            else:
                continue
            first = node.lineno - 1  # the comment may stand on the block of imports this one is part of
            while first > 0 and lines[first - 1].strip().startswith(("from ", "import ", "#")):
                first -= 1
            around = "\n".join(lines[first : node.end_lineno or node.lineno])
            for target, names in pairs:
                files = (
                    str(path.relative_to(package.parent)),
                    str(known[target].relative_to(package.parent)),
                )
                found.append(
                    Import(name, target, names, *files, node.lineno, id(node) in inside, "#" in around)
                )
    return found


def wing(module: str) -> str:
    """The wing a dotted module name lives in."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in {"api", "__init__"}:
        return "api"  # the package itself (hookdump.open) and the API: the library's front
    if parts[1] == "__main__":
        return "cli"
    return "ground" if parts[1] in GROUND else parts[1]


def upward(found: list[Import]) -> list[str]:
    """Each import that runs from a wing to one it may not import, as a sentence naming both files."""
    bad = []
    for i in found:
        a, b = wing(i.source), wing(i.target)
        if a != b and b not in MAY_IMPORT[a]:
            bad.append(
                f"{_where(i)} ({a}) imports {', '.join(i.names) or i.target} from {i.target_file} ({b})"
            )
    return bad


def cycles(found: list[Import]) -> list[str]:
    """Each import cycle between modules, as the chain of files and the names each imports from the next."""
    edges: dict[str, dict[str, Import]] = {}
    for i in found:
        if i.source != i.target:
            edges.setdefault(i.source, {}).setdefault(i.target, i)
    seen: set[frozenset[str]] = set()
    out = []

    def walk(start: str, node: str, path: list[Import]) -> None:
        for target, i in sorted(edges.get(node, {}).items()):
            if target == start:
                chain = [*path, i]
                key = frozenset(c.source for c in chain)
                if key not in seen:
                    seen.add(key)
                    out.append(
                        " -> ".join(f"{_where(c)} imports {', '.join(c.names) or c.target}" for c in chain)
                    )
            elif target > start and target not in {c.source for c in path} and len(path) < 8:
                walk(start, target, [*path, i])

    for module in sorted(edges):
        walk(module, module, [])
    return out


def unexplained(found: list[Import]) -> list[str]:
    """Each function-level import with no comment saying why (only speed is a reason: torch kept out of
    ``--help``, numpy out of ``import hookdump``)."""
    return [
        f"{_where(i)} imports {', '.join(i.names) or i.target} inside a function, with no comment"
        for i in found
        if i.in_function and not i.commented
    ]


def _where(i: Import) -> str:
    return f"{i.file}:{i.line}"


def test_no_wing_imports_one_above_it() -> None:
    bad = upward(imports(PACKAGE))
    assert not bad, "imports that run up the wings (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_cycle_anywhere() -> None:
    found = cycles(imports(PACKAGE))
    assert not found, "import cycles:\n" + "\n".join(found)


def test_a_function_level_import_says_why() -> None:
    bad = unexplained(imports(PACKAGE))
    assert not bad, "function-level imports are for speed only, and say so in a comment:\n" + "\n".join(bad)


def test_every_module_lives_in_a_wing_or_at_the_ground() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__", "api"}
    assert top <= GROUND, f"top-level modules outside the ground: {sorted(top - GROUND)}"
    for folder in (p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        assert folder.name in MAY_IMPORT, f"{folder.name}/ is not a wing of docs/architecture.md"
        assert ast.get_docstring(ast.parse((folder / "__init__.py").read_text())), (
            f"{folder.name}/__init__.py says nothing"
        )


SOURCES = "hookdump.model.sources"


def core_imports_a_source(found: list[Import]) -> list[str]:
    """Each import of a model source (``model/sources/``) by the model wing's core (``model/*.py``), which
    serves every source and so names none."""
    return [
        f"{_where(i)} ({i.source}) imports {i.target}"
        for i in found
        if i.source.startswith("hookdump.model.") and not i.source.startswith(SOURCES)
        and i.target.startswith(SOURCES)
    ]  # fmt: skip


def test_the_model_core_imports_no_source() -> None:
    bad = core_imports_a_source(imports(PACKAGE))
    assert not bad, "the model wing's core imports a source (model/sources/):\n" + "\n".join(bad)


def test_every_registered_source_gives_the_whole_interface() -> None:
    """Each source in the registry has its prefix and ``source(spec) -> Source``; the registry holds every
    module (or package) of ``model/sources/`` and nothing else; ``Source`` asks each for every part."""
    import inspect
    from dataclasses import MISSING, fields

    from hookdump.model import sources
    from hookdump.model.sources.base import Source

    folder = PACKAGE / "model" / "sources"
    found = {p.stem for p in folder.glob("*.py")} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").is_file()
    }
    assert {m.__name__.rsplit(".", 1)[1] for m in sources.SOURCES.values()} == found - {"__init__", "base"}
    for prefix, module in sources.SOURCES.items():
        assert prefix == module.PREFIX and isinstance(prefix, str), module.__name__
        signature = inspect.signature(module.source)
        assert list(signature.parameters) == ["spec"] and signature.return_annotation == "Source", module
    assert list(sources.SOURCES)[-1] == "", "timm (plain names) is tried last"
    required = [f.name for f in fields(Source) if f.default is MISSING and f.default_factory is MISSING]
    assert required == ["name", "build_meta", "load", "check_weights", "preprocess"]
    assert {f.name for f in fields(Source)} == {*required, "record", "rerun", "attention"}


#: Inside a wing, its parts from the bottom up: a part imports only the parts before it in its list.
#: ``core``: the package's own modules (``model/*.py``), which import each other; ``each``: every other
#: sub-package or module, a peer of the others that imports none of them; the package's ``__init__`` (a
#: registry) stands over all its parts.
PARTS = {
    "hookdump.store": ["formats", "folder"],
    "hookdump.model": ["core", "sources"],
    "hookdump.model.sources": ["base", "each"],
}


def part(module: str, package: str, package_dir: Path) -> str | None:
    """The part of ``package`` that ``module`` is in (a name of ``PARTS[package]``, ``core``, a peer's
    own name), ``__init__`` for the package itself, or None outside it."""
    if module == package:
        return "__init__"
    if not module.startswith(package + "."):
        return None
    first = module[len(package) + 1 :].split(".")[0]
    if first in PARTS[package]:
        return first
    if "core" in PARTS[package] and not (package_dir / first / "__init__.py").is_file():
        return "core"
    return first


def downward(found: list[Import], package_root: Path = PACKAGE) -> list[str]:
    """Each import inside a wing from one of its parts to a part that is not below it (``PARTS``), as a
    sentence naming both files."""
    bad = []
    for package, order in PARTS.items():
        folder = package_root.parent.joinpath(*package.split("."))
        rank = {name: i for i, name in enumerate(order)}
        for i in found:
            a, b = part(i.source, package, folder), part(i.target, package, folder)
            if a is None or b is None or a == b or a == "__init__":
                continue
            ra, rb = rank.get(a, rank.get("each")), rank.get(b, rank.get("each"))
            if b == "__init__" or ra is None or rb is None or rb >= ra:
                bad.append(
                    f"{_where(i)} ({package}: {a}) imports {', '.join(i.names) or i.target} from"
                    f" {i.target_file} ({b}), which is not below it"
                )
    return bad


def test_each_sub_package_imports_only_downward() -> None:
    """The store's formats part imports nothing of its folder part; the model's core imports no source,
    and no source another; each part of a wing imports only the parts below it (``PARTS``)."""
    bad = downward(imports(PACKAGE))
    assert not bad, "imports that run up or across a wing's parts (PARTS):\n" + "\n".join(bad)


def test_the_store_formats_import_nothing_of_the_folder_part() -> None:
    found = [i for i in imports(PACKAGE) if i.source.startswith("hookdump.store.formats")]
    assert found and not [i for i in found if i.target.startswith("hookdump.store.folder")], found


def test_the_part_check_catches_formats_importing_the_folder_and_one_source_another(tmp_path: Path) -> None:
    copy = tmp_path / "hookdump"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    npy = copy / "store" / "formats" / "npy.py"
    npy.write_text(npy.read_text() + "\nfrom ..folder.manifest import MANIFEST  # added\n")
    tv = copy / "model" / "sources" / "tv.py"
    tv.write_text(tv.read_text() + "\nfrom .hf import load  # added\n")
    bad = downward(imports(copy), copy)
    assert [b.split(" (")[0] for b in bad] == [
        f"hookdump/store/formats/npy.py:{len(npy.read_text().splitlines())}",
        f"hookdump/model/sources/tv.py:{len(tv.read_text().splitlines())}",
    ], bad


MAX_LINES, REASON_LINES = 300, 250


def made_package(folder: Path, files: dict[str, int]) -> Path:
    """A made-up ``hookdump`` package in ``folder``: each file (a path inside it) of that many lines."""
    package = folder / "hookdump"
    for name, lines in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("x = 1\n" * lines)
    return package


def long_modules(package: Path, doc: str) -> list[str]:
    """Each module over ``MAX_LINES`` lines, and each over ``REASON_LINES`` that ``doc`` (the text of
    docs/architecture.md) does not name in its list of the modules that stay whole, with a reason."""
    listed = doc.partition("## Modules over 250 lines")[2].partition("\n## ")[0]
    bad = []
    for path in sorted(package.rglob("*.py")):
        count = len(path.read_text().splitlines())
        name = path.relative_to(package.parent).as_posix()
        if count > MAX_LINES:
            bad.append(f"{name} has {count} lines (at most {MAX_LINES}): split it by responsibility")
        elif count > REASON_LINES and f"`{name}`" not in listed:
            bad.append(f"{name} has {count} lines, and docs/architecture.md gives no reason it stays whole")
    return bad


def test_every_module_fits_on_a_screen_or_two() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    bad = long_modules(PACKAGE, doc)
    assert not bad, "modules too long:\n" + "\n".join(bad)


def test_the_length_check_catches_a_long_module_and_an_unexplained_one(tmp_path: Path) -> None:
    copy = made_package(tmp_path, {"store/long.py": 301, "store/whole.py": 260, "store/told.py": 260})
    doc = "## Modules over 250 lines\n\n* `hookdump/store/told.py`: one job.\n\n## Next\n"
    doc += "`hookdump/store/whole.py` is named, but not in that list"
    assert [b.split(" has")[0] for b in long_modules(copy, doc)] == [
        "hookdump/store/long.py",
        "hookdump/store/whole.py",
    ]


def missing_rows(package: Path, doc: str) -> list[str]:
    """Each module of ``package`` without its row in ``doc``'s "Every module in one line" (its path in
    backticks, or its package folder's row naming its file), and each row naming no module there is."""
    table = doc.partition("## Every module in one line")[2].partition("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| `hookdump/")]
    named = {line.split("`")[1]: line for line in rows}
    bad = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package.parent).as_posix()
        folder = name.rpartition("/")[0] + "/"
        if name not in named and not (folder in named and f"`{path.name}`" in named[folder]):
            bad.append(f"{name} has no row in docs/architecture.md's list of every module")
    for name in named:
        if not (package.parent / name).exists():
            bad.append(f"docs/architecture.md has a row for {name}, which is not there")
    return bad


def test_every_module_has_its_row_in_the_architecture_page() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    bad = missing_rows(PACKAGE, doc)
    assert not bad, "docs/architecture.md is out of date:\n" + "\n".join(bad)


def test_the_row_check_catches_a_missing_row_and_a_stale_one(tmp_path: Path) -> None:
    copy = made_package(tmp_path, {"store/kept.py": 0, "store/new.py": 0, "store/folder/inner.py": 0})
    doc = (
        "## Every module in one line\n\n| `hookdump/store/kept.py` | x |\n"
        "| `hookdump/store/folder/` | has `inner.py` |\n| `hookdump/store/gone.py` | y |\n\n## Next\n"
    )
    assert missing_rows(copy, doc) == [
        "hookdump/store/new.py has no row in docs/architecture.md's list of every module",
        "docs/architecture.md has a row for hookdump/store/gone.py, which is not there",
    ]


def test_the_source_check_catches_a_core_module_that_imports_a_source(tmp_path: Path) -> None:
    copy = tmp_path / "hookdump"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    layers = copy / "model" / "layers.py"
    layers.write_text(layers.read_text() + "\nfrom .sources.hf import load  # added\n")
    assert [b.split(" (")[0] for b in core_imports_a_source(imports(copy))] == [
        f"hookdump/model/layers.py:{len(layers.read_text().splitlines())}"
    ]


def test_the_checks_catch_a_bad_import_and_a_cycle(tmp_path: Path) -> None:
    """The checks above fail on a copy of the package with an upward import and a cycle added."""
    copy = tmp_path / "hookdump"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    manifest = copy / "store" / "folder" / "manifest.py"
    manifest.write_text(manifest.read_text() + "\nfrom ...capture.run import capture_run  # added\n")
    units = copy / "units.py"
    units.write_text(units.read_text() + "\nfrom .errors import UsageError as Again  # added\n")
    errors = copy / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom .units import first_few  # added\n")
    found = imports(copy)
    bad = upward(found)
    assert [
        b for b in bad if b.startswith("hookdump/store/folder/manifest.py:")
    ] and "capture_run from hookdump/capture/run.py" in "\n".join(bad), bad
    loops = cycles(found)
    assert any("errors.py" in c and "units.py" in c and "first_few" in c for c in loops), loops
