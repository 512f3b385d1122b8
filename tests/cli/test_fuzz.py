"""Fuzzing the command line with hypothesis: layer specs, ``--input-size``, ``--config`` files, file names.

Every example drives the real app (``hookdump.cli.app.app`` in process, ``catch_exceptions=False``) and holds
it to README's "Exit codes": the exit code is a documented one (0, 2, 3 or 4; 1 is "unexpected failure",
a bug), no traceback and no "failed unexpectedly" anywhere, a failure is exactly one ``error:`` paragraph
on stderr (under ``--json`` also one error object on stdout with the same exit code), and nothing is
written where it should not be. Examples are cheap: ``capture --dry-run`` (every check a capture makes
before its first forward) and ``list-modules --filter`` on resnet18 (and the seed's LeNet plugin) at
3x32x32, a few real captures for odd ``--out`` and input names, and ``show`` / ``stats`` / ``report`` on a
small real capture folder.

In CI the run is short and the same every time: derandomized (a fixed seed), a few dozen examples per test,
``deadline=None``, no example database, and hypothesis's own folder (its unicode cache) in a temporary
folder, so nothing is written into the checkout. A longer, random run, for a person now and then:

    HOOKDUMP_FUZZ_EXAMPLES=2000 HOOKDUMP_SHARED_CHECKOUT=1 .venv/bin/python -m pytest -q \
        tests/cli/test_fuzz.py

(``HOOKDUMP_FUZZ_EXAMPLES=N``: N examples per test, a new random seed each run; a failure prints the
``@reproduce_failure`` line that replays it). Every input the fuzzer found a bug with stays below as an
``@example``.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from common import PLUGINS, inputs_of
from hypothesis import HealthCheck, configuration, event, example, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner, Result

import hookdump
from hookdump.cli.app import app
from hookdump.cli.config import config_keys
from hookdump.errors import HookdumpError
from hookdump.inputs.spec import sample_path

# Hypothesis keeps caches in ./.hypothesis, the checkout (where pytest starts); its pytest plugin writes
# there while collecting, before any fixture runs. A temporary folder instead, removed at exit.
HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="hookdump-hypothesis-")
atexit.register(shutil.rmtree, HYPOTHESIS_HOME, ignore_errors=True)
configuration.set_hypothesis_home_dir(HYPOTHESIS_HOME)

PACKAGE = str(Path(hookdump.__file__).parent)
BAIT = (1, 7, 5, 5)  # the shape of the tensor file beside a capture, which no name may lead to
DOCUMENTED = (0, 2, 3, 4)  # README "Exit codes": 1 is a bug; 130 / 143 need a signal
LONG = int(os.environ.get("HOOKDUMP_FUZZ_EXAMPLES", "0") or 0)
RUNNER = CliRunner()
TINY = ["-m", "resnet18", "--input-size", "3,32,32"]
MODELS = {
    "resnet18": TINY,
    "seed_lenet": ["--import", str(PLUGINS / "lenet_plugin.py"), "-m", "seed_lenet", *TINY[2:]],
    # a reused module (act: 3 calls), a dict output, keyword inputs, a module that never runs
    "odd_net": ["--import", str(PLUGINS / "odd_plugin.py"), "-m", "odd_net", "--input-size", "3,16,16"],
}


def fuzz(examples: int) -> settings:
    """``examples`` fixed examples in CI; ``HOOKDUMP_FUZZ_EXAMPLES`` random ones when set."""
    return settings(
        max_examples=LONG or examples,
        derandomize=not LONG,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real capture of resnet18 on the bundled photo: act1, layer1 (maps) and fc (no map), in every format;
    beside it, a tensor file ``x.npy`` of its own shape, ``BAIT``, that nothing may reach."""
    root = tmp_path_factory.mktemp("captured")
    out = root / "cap"
    result = invoke(["capture", *TINY, "--sample", "-l", "act1", "-l", "layer1", "-l", "fc", "--format",
                     "npy,pt,safetensors", "-o", str(out), "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    np.save(root / "x.npy", np.full(BAIT, 7, np.float32))
    return out


def new_dir(scratch: Path) -> Path:
    """A fresh folder for one example."""
    return Path(tempfile.mkdtemp(dir=scratch))


def files_under(root: Path) -> set[str]:
    """Every file below ``root`` (relative paths as the OS gives them, undecodable bytes escaped)."""
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def invoke(args: list[str]) -> Result:
    return RUNNER.invoke(app, args, catch_exceptions=False)


def run(args: list[str], json_out: bool = False) -> Result:
    """Run hookdump with ``args`` and check what every run owes: a documented exit code, no traceback, and
    on failure one ``error:`` paragraph (and under ``--json`` one JSON object on stdout)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke(args)
    event(f"exit {result.exit_code}")
    shown = f"hookdump {args!r}\nexit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.exit_code in DOCUMENTED, shown
    for text in (result.stdout, result.stderr):
        assert "Traceback" not in text and "failed unexpectedly" not in text, shown
    ours = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if inside(w.filename, PACKAGE)]
    assert not ours, f"{shown}\nwarnings (printed on stderr outside pytest): {ours}"
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == (1 if result.exit_code else 0), shown
    json_mode = "--json" in (args[: args.index("--")] if "--" in args else args)  # as hookdump decides
    if result.exit_code and json_mode:
        data = json.loads(result.stdout)
        assert data["exit_code"] == result.exit_code and data["error"], shown
    elif json_out and result.exit_code == 0:
        json.loads(result.stdout)
    return result


# ---------------------------------------------------------------------------------------------------------
# Strategies


def clean(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Generated text that cannot fake the markers the checks look for."""
    return text.filter(lambda s: "error:" not in s and "Traceback" not in s and "failed unexp" not in s)


@st.composite
def mutated(draw: st.DrawFn, seeds: list[str], atoms: list[str]) -> str:
    """One of ``seeds`` with up to three spans inserted, deleted or replaced by ``atoms``."""
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        end = min(len(text), at + draw(st.integers(1, 3)))
        atom = draw(st.sampled_from(atoms))
        operation = draw(st.sampled_from(["insert", "delete", "replace"]))
        if operation == "insert":
            text = text[:at] + atom + text[at:]
        elif operation == "delete":
            text = text[:at] + text[end:]
        else:
            text = text[:at] + atom + text[end:]
    return text


def joined(atoms: list[str], most: int = 6, least: int = 0) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(atoms), min_size=least, max_size=most).map("".join)


SPEC_ATOMS = [
    "layer1", "layer4", "conv1", "act1", "fc", "model", "0", "1", "12", ".", "..", "*", "**", "?", "[",
    "]", "[0]", "[1]", "[!0]", "[z-a]", "[]", "@", "@0", "@1", "@-1", "re:", "(", ")", "(?P<", "\\", "\\d+",
    "/", " ", "\t", "\n", ":", "feat:", "feat:2", "feat:*", "-", "--", "+", "{2}", "|", "^", "$", "é", "日",
    "\x00", "\u200b", "\udcff", "٣",
]  # fmt: skip
REAL_SPECS = [
    "layer1.0.conv1", "layer1[0].conv1", "model.layer1[0].conv1", "layer1", "layer1@0", "layer1.0.act1@0",
    "feat:2", "feat:-1", "feat:*", "layer4.1.bn2", "fc", "conv2", "fc3", "re:^layer\\d$", "layer*.0",
    "layer1.**", "conv1.weight", "bn1.running_mean", "global_pool.pool", "act", "act@2", "act@3", "split",
    "gate", "head", "head.fc", "unused", "conv", "*",
]  # fmt: skip
OPTION_SETS = [
    ["--what", "input"], ["--what", "both"], ["--attention"], ["--reduce", "mean"], ["--reduce", "cls"],
    ["--reduce", "max"], ["--grad"], ["--grad", "--target", "3"], ["--format", "safetensors"],
    ["--format", "pt,npy"], ["--no-early-stop"], ["--channels-last"], ["--save-dtype", "keep"],
    ["--dtype", "bfloat16"], ["--png"], ["--batch-size", "1"],
]  # fmt: skip
capture_options = st.lists(st.sampled_from(OPTION_SETS), max_size=3, unique_by=lambda o: o[0]).map(
    lambda sets: [a for o in sets for a in o]
)
layer_specs = clean(
    st.one_of(
        st.sampled_from(REAL_SPECS),
        mutated(REAL_SPECS, SPEC_ATOMS),
        joined(SPEC_ATOMS),
        st.text(max_size=16),
    )
)


def layer_args(specs: list[str], equals: bool) -> list[str]:
    return [a for s in specs for a in ([f"--layer={s}"] if equals else ["-l", s])]


SIZE_NUMBERS = st.one_of(
    st.integers(-2, 64).map(str),
    st.sampled_from(["0", "00", "-0", "+3", " 3", "3 ", "1_6", "٣", "2" * 40, str(2**40), "3.0", ""]),
)
SIZE_ATOMS = [",", ",,", "x", "X", " ", ", ", ";", "-", "+", ".", "e", "_", "\t", "\x00", "٣", "(", ")"]
SEPARATORS = st.sampled_from([",", "x", ", ", ",,", " "])
input_sizes = st.one_of(
    st.tuples(st.sampled_from([3, 3, 1, 4]), st.integers(1, 64), st.integers(1, 64)).map(
        lambda t: ",".join(map(str, t))
    ),
    st.tuples(st.lists(SIZE_NUMBERS, min_size=1, max_size=4), SEPARATORS).map(lambda t: t[1].join(t[0])),
    st.lists(st.one_of(st.sampled_from(SIZE_ATOMS), st.integers(0, 99).map(str)), max_size=7).map("".join),
)


# ---------------------------------------------------------------------------------------------------------
# 1. Layer specs


@fuzz(80)
@example(specs=["[]"], model="resnet18", options=[], equals=False, json_out=False)  # exit 1: re.error (glob)
@example(specs=["layer[z-a]"], model="seed_lenet", options=[], equals=True, json_out=True)
@given(
    specs=st.lists(layer_specs, min_size=1, max_size=2),
    model=st.sampled_from(sorted(MODELS)),
    options=capture_options,
    equals=st.booleans(),
    json_out=st.booleans(),
)
def test_layer_specs_in_capture_dry_run(
    scratch: Path, specs: list[str], model: str, options: list[str], equals: bool, json_out: bool
) -> None:
    out = new_dir(scratch) / "out"
    args = ["capture", *MODELS[model], "--sample", "--dry-run", "-o", str(out), *layer_args(specs, equals)]
    run(args + options + (["--json"] if json_out else []), json_out)
    assert not out.exists(), "--dry-run wrote its output folder"


PLUGIN_SPECS = [
    "conv1",
    "conv2",
    "fc1",
    "fc3",
    "conv",
    "act",
    "act@0",
    "act@2",
    "split",
    "gate",
    "head",
    "head.fc",
    "conv*",
    "re:^fc",
    "*",
    "**",
    "feat:0",
]  # fmt: skip (seed_lenet's and odd_net's modules)


@fuzz(30)
@example(specs=["fc1"], model="seed_lenet", options=["--channels-last"])  # exit 1: LeNet's .view() (exit 2)
@given(
    specs=st.lists(
        clean(st.one_of(st.sampled_from(PLUGIN_SPECS), mutated(PLUGIN_SPECS, SPEC_ATOMS))),
        min_size=1,
        max_size=2,
    ),
    model=st.sampled_from(["seed_lenet", "odd_net"]),
    options=capture_options,
)
def test_layer_specs_in_a_real_capture(
    scratch: Path, specs: list[str], model: str, options: list[str]
) -> None:
    """The same, through the forward pass: a finished capture lists files that are all there, in --out."""
    folder = new_dir(scratch)
    out = folder / "out"
    result = run(["capture", *MODELS[model], "--sample", "-o", str(out), *layer_args(specs, False), *options])
    if result.exit_code == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["complete"] is True and manifest["tensors"]
        assert all((out / t["file"]).is_file() for t in manifest["tensors"])
    else:
        assert not (out / "manifest.json").exists()
    assert files_under(folder) == {os.path.join("out", n) for n in files_under(out)}


@fuzz(60)
@example(spec="[]", model="resnet18", equals=False, json_out=False)  # exit 1: re.error from the glob
@example(spec="layer[[]1]", model="resnet18", equals=False, json_out=False)  # re's FutureWarning on stderr
@example(spec="re:[[a]", model="resnet18", equals=False, json_out=False)  # the same
@given(spec=layer_specs, model=st.sampled_from(sorted(MODELS)), equals=st.booleans(), json_out=st.booleans())
def test_layer_specs_in_list_modules_filter(spec: str, model: str, equals: bool, json_out: bool) -> None:
    flag = [f"--filter={spec}"] if equals else ["--filter", spec]
    run(["list-modules", *MODELS[model], *flag] + (["--json"] if json_out else []), json_out)


# ---------------------------------------------------------------------------------------------------------
# 2. --input-size


@fuzz(60)
@given(size=input_sizes, command=st.sampled_from(["capture", "list-modules"]), json_out=st.booleans())
def test_input_size(scratch: Path, size: str, command: str, json_out: bool) -> None:
    given = ["-m", "resnet18", "--input-size", size]
    if command == "capture":
        out = new_dir(scratch) / "out"
        args = ["capture", *given, "--random-input", "--dry-run", "-l", "layer1", "-o", str(out)]
    else:
        args = ["list-modules", *given, "--filter", "layer1"]
    run(args + (["--json"] if json_out else []), json_out)


# ---------------------------------------------------------------------------------------------------------
# 3. --config files


CAPTURE = get_command(app).commands["capture"]  # type: ignore[attr-defined]
LIST_MODULES = get_command(app).commands["list-modules"]  # type: ignore[attr-defined]
# `import` runs code and `pretrained` reaches the network, both by design: not fuzzed.
CONFIG_KEYS = sorted((set(config_keys(CAPTURE)) | set(config_keys(LIST_MODULES))) - {"import", "pretrained"})
GOOD_VALUES: dict[str, list[Any]] = {
    "model": ["resnet18", "seed_lenet", "nope", "alt_gvt", ""],
    "layer": [["layer1"], ["feat:2", "fc"], "layer1", [], ["["], ["re:("]],
    "images": [["x.png"], ["."], "missing.jpg", ["@list.txt"], [""]],
    "input_size": ["3,32,32", "3,1,1", "1,32,32", "0,0,0", "3,32"],
    "format": ["npy", "pt,safetensors", "npy,npy", "", "NPY", "csv"],
    "what": ["output", "input", "both", "all"],
    "dtype": ["float32", "bfloat16", "fp16", "int8"],
    "save_dtype": ["keep", "float16", "bfloat16", "float64"],
    "reduce": ["none", "mean", "max", "cls", "sum"],
    "device": ["cpu", "auto", "cuda", "cuda:9", "tpu", "cuda:-1"],
    "shard": ["0/1", "1/2", "2/2", "a/b", "0/0", "-1/2", "1"],
    "shard_size": ["2GB", "0", "1", "-1GB", "1e3", "nan", "9" * 30 + "GB", "GB"],
    "seed": [0, -1, 2**64 - 1, 2**64],
    "target": [0, -1, 999, 10**6],
    "batch_size": [1, 0, -1, 2**62],
    "workers": [0, 1, -1, 10**9],
    "depth": [1, 0, -1],
    "filter": ["layer1", "feat:*", "["],
    "checkpoint": ["missing.pt", ".", "c.toml"],
    "out": ["out", ".", "..", ""],
    "model_arg": [["num_classes=10"], ["in_chans=1"], ["bogus=1"], ["="], ["num_classes=x"], "num_classes=0"],
}
CONFIG_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/~"), max_size=12
)  # no path separators, no home folder: relative paths stay in the example's folder
scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, -1, 2**64, -(2**64)]),
    st.floats(),
    CONFIG_TEXT,
)
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(CONFIG_TEXT, scalars, max_size=2))


@st.composite
def config_entries(draw: st.DrawFn) -> dict[str, Any]:
    """Random keys (most of them real option names) with values of the right or a random type."""
    entries: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.one_of(st.sampled_from([*CONFIG_KEYS, "Model", "batch-size"]), CONFIG_TEXT))
        good = GOOD_VALUES.get(key)
        entries[key] = draw(st.sampled_from(good)) if good and draw(st.booleans()) else draw(values)
    return entries


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_value(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "nan" if math.isnan(value) else f"{value:+}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    escaped = ("\\" + c if c in '"\\' else f"\\u{ord(c):04x}" if c < " " or c == "\x7f" else c for c in value)
    out = "".join(escaped)
    return f'"{out}"'


TOML_ATOMS = ["[", "]", "{", "}", "=", '"', "'", ".", ",", "#", "\n", "\\", " ", "capture", "1", "true", "é"]


@st.composite
def config_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """(command, file contents): a TOML config that mostly gets far (a tiny model, the bundled photo, one
    layer) with random entries on top, at the top level or in a table; sometimes mangled or not UTF-8."""
    command = draw(st.sampled_from(["capture", "list-modules"]))
    base: dict[str, Any] = {"model": "resnet18", "input_size": "3,32,32"}
    if command == "capture":
        base.update(sample=True, layer=["layer1"], out="out")
    table = draw(st.sampled_from([None, "capture", "list-modules", "list_modules", "other"]))
    top, inner = dict(base), draw(config_entries())
    if table is None:
        top.update(inner)
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in top.items()]
    if table is not None:
        lines += [f"[{table}]"] + [f"{toml_key(k)} = {toml_value(v)}" for k, v in inner.items()]
    text = "\n".join(lines) + "\n"
    damage = draw(st.sampled_from(["none", "none", "mutate", "bytes"]))
    if damage == "mutate":
        text = draw(mutated([text], TOML_ATOMS))
    data = text.encode("utf-8", "surrogatepass")
    if damage == "bytes":
        data = draw(st.sampled_from([b"\xff\xfe", b'model = "\xff"\n', b"\x00", b""])) + data
    return command, data


@fuzz(100)
@given(config=config_files(), json_out=st.booleans())
def test_config_files(scratch: Path, config: tuple[str, bytes], json_out: bool) -> None:
    command, data = config
    folder = new_dir(scratch)
    path = folder / "c.toml"
    path.write_bytes(data)
    before = files_under(folder)
    extra = ["--dry-run"] if command == "capture" else []
    run([command, "--config", str(path), *extra] + (["--json"] if json_out else []), json_out)
    assert files_under(folder) == before, "a --config run wrote into the config's folder"


@fuzz(40)
@given(
    changes=st.dictionaries(st.sampled_from([*CONFIG_KEYS, "cwd"]), values, max_size=3),
    mangle=st.booleans(),
    data=st.data(),
)
def test_manifest_as_config(
    scratch: Path, captured: Path, changes: dict[str, Any], mangle: bool, data: st.DataObject
) -> None:
    manifest = json.loads((captured / "manifest.json").read_text())
    for key, value in changes.items():
        (manifest if key == "cwd" else manifest["options"])[key] = value
    text = json.dumps(manifest, indent=2)
    if mangle:
        text = data.draw(mutated([text], ["{", "}", "[", "]", '"', ",", ":", "null", "\\", "1e999", "é"]))
    folder = new_dir(scratch)
    (folder / "manifest.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    run(["capture", "--config", str(folder / "manifest.json"), "--dry-run", "-o", str(folder / "out")])
    assert not (folder / "out").exists()


# ---------------------------------------------------------------------------------------------------------
# 4. File names


NAME_ATOMS = [
    "..", ".", "-", "--", "-o", "--help", " ", "a b", "é", "日本", "\u200b", "\t", "\n", "*", "?", "[a]", "[",
    "@", "$HOME", "'", '"', "\\", ":", "x" * 120, "\udcff", "nul\x00", ".hidden", "._apple", "manifest.json",
    ".hookdump-partial", ".hookdump.lock", "hookdump-out", "taken",
]  # fmt: skip
name_segments = clean(
    st.one_of(
        joined(NAME_ATOMS, 4, 1),
        st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=16),
    )
)


def make_file(path: Path, source: Path) -> bool:
    """Copy ``source`` to ``path`` (folders made); False when the OS refuses the name."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, path)
    except (OSError, ValueError):
        return False
    return path.is_file()


class Cwd:
    """Run with ``folder`` as the working folder (relative names), and come back."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.back = folder, os.getcwd()

    def __enter__(self) -> None:
        os.chdir(self.folder)

    def __exit__(self, *exc: object) -> None:
        os.chdir(self.back)


@fuzz(40)
@example(name="\udcff", suffix=".jpg", how="folder", dry_run=False)  # exit 1: report's page, strict UTF-8
@given(
    name=name_segments,
    suffix=st.sampled_from([".jpg", ".png", ".JPG", ".jpeg", "", ".txt"]),
    how=st.sampled_from(["absolute", "relative", "after --", "folder"]),
    dry_run=st.booleans(),
)
def test_input_names(scratch: Path, name: str, suffix: str, how: str, dry_run: bool) -> None:
    folder = new_dir(scratch)
    inputs = folder / "in"
    inputs.mkdir()
    made = make_file(inputs / (name + suffix), sample_path())
    given = {
        "absolute": [str(inputs / (name + suffix))],
        "relative": [name + suffix],
        "after --": ["--", name + suffix],
        "folder": [str(inputs)],
    }[how]
    out = folder / "out"
    args = ["capture", *TINY, "-l", "layer1", "-o", str(out), *(["--dry-run"] if dry_run else []), *given]
    with Cwd(inputs):
        result = run(args)
    image = suffix.lower() in (".jpg", ".jpeg", ".png")
    if made and image and (how == "absolute" or (how == "after --" and not name.startswith("@"))):
        assert result.exit_code == 0, result.stderr
    if how == "folder" and made and image and not name.startswith("."):
        assert result.exit_code == 0, result.stderr
    if result.exit_code == 0 and not dry_run:
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["complete"] is True
        cwd = Path(manifest["cwd"])  # the names read back as written
        assert all((cwd / i["path"]).is_file() for i in inputs_of(out))
        for command in ("report", "show", "stats"):  # the input's name is in the page and the captions
            assert run([command, str(out)]).exit_code == 0
    elif dry_run or result.exit_code:
        assert not (out / "manifest.json").exists()


@fuzz(40)
@example(segments=["\udcff"], dry_run=False)  # exit 1: the summary naming a non-UTF-8 folder (strict stdout)
@example(segments=["manifest.json", ".."], dry_run=False)  # exit 1: mkdir -p made OUT/manifest.json a folder
@example(segments=[".hookdump-partial", ".."], dry_run=False)  # the same with the scratch folder
@given(segments=st.lists(name_segments, min_size=1, max_size=3), dry_run=st.booleans())
def test_out_names(scratch: Path, segments: list[str], dry_run: bool) -> None:
    folder = new_dir(scratch)
    base = folder / "a" / "b" / "c"
    base.mkdir(parents=True)
    (base / "taken").write_text("a file, not a folder")
    out = os.path.join(base, *segments)
    before = files_under(folder)
    args = ["capture", *TINY, "--sample", "-l", "layer1", "-o", out, *(["--dry-run"] if dry_run else [])]
    result = run(args)
    new = files_under(folder) - before
    if dry_run or result.exit_code:
        assert not any(n.endswith("manifest.json") for n in new), new
    if dry_run:
        assert not new, new
    else:  # written only inside --out (its lock file included)
        assert all(inside(os.path.join(folder, n), out) for n in new), (out, new)
    if result.exit_code == 0 and not dry_run:
        assert json.loads(Path(out, "manifest.json").read_text())["complete"] is True


@fuzz(40)
@example(name="Ā", suffix=".npy", how="absolute", output=None)  # exit 1: Pillow's Latin-1 font, the caption
@example(name="x" * 251, suffix=".npy", how="absolute", output=None)  # exit 2: scratch name over NAME_MAX
@given(
    name=name_segments,
    suffix=st.sampled_from([".npy", ".NPY", ".pt", ".safetensors", ".png", "", ".npy.npy"]),
    how=st.sampled_from(["absolute", "relative", "after --"]),
    output=st.one_of(st.none(), name_segments.map(lambda s: s + ".png"), name_segments),
)
def test_show_file_names(
    scratch: Path, captured: Path, name: str, suffix: str, how: str, output: str | None
) -> None:
    folder = new_dir(scratch)
    kind = suffix.lower() if suffix.lower() in (".pt", ".safetensors") else ".npy"
    source = captured / ("tensors.safetensors" if kind == ".safetensors" else f"layer1{kind}")
    path = folder / (name + suffix)
    made = make_file(path, source)
    arg = {"absolute": [str(path)], "relative": [name + suffix], "after --": ["--", name + suffix]}[how]
    target = None if output is None else os.path.join(folder, "pictures", output)
    before = files_under(folder)
    with Cwd(folder):
        result = run(["show", *([] if target is None else ["-o", target]), *arg])
    tensor = suffix.lower() in (".npy", ".pt", ".safetensors") and not path.name.startswith(".")
    if made and tensor and how != "relative" and output is None:
        assert result.exit_code == 0, result.stderr
    new = files_under(folder) - before
    # the PNGs, and the record of what hookdump wrote in each folder it wrote in
    assert all(n.endswith(".png") or os.path.basename(n) == ".hookdump-files.json" for n in new), new
    if result.exit_code:
        assert not new, new
    for n in new:  # beside the tensor, or where -o says
        where = os.path.join(folder, n)
        assert (target is not None and inside(where, os.path.dirname(target) or folder)) or inside(
            where, str(path.parent)
        ), (n, target)


@fuzz(25)
@example(name="\udcff", command="show", json_out=False)  # exit 1: the summary naming a non-UTF-8 file
@example(name="\udcff", command="report", json_out=False)  # exit 1: the page written as strict UTF-8
@given(name=name_segments, command=st.sampled_from(["stats", "report", "show"]), json_out=st.booleans())
def test_capture_folder_names(scratch: Path, captured: Path, name: str, command: str, json_out: bool) -> None:
    folder = new_dir(scratch)
    copy = folder / name
    try:
        shutil.copytree(captured, copy)
        made = copy.is_dir() and (copy / "manifest.json").is_file()
    except (OSError, ValueError):
        made = False
    before = files_under(folder)
    with Cwd(folder):
        result = run([command, str(copy)] + (["--json"] if json_out else []), json_out)
    if made:
        assert result.exit_code == 0, result.stderr
    new = files_under(folder) - before
    if command == "stats" or result.exit_code:
        assert not new, new
    assert all(inside(os.path.join(folder, n), str(copy)) for n in new), new


KEYS = ["act1", "layer1", "fc"]
ODD_KEYS = [
    "../x", "../x.npy", "..", ".", "", "/etc/passwd", str(Path.home()), "x", "layer1.npy", "manifest",
    "tensors.safetensors", "__metadata__", "layer1/../act1", "./layer1", "LAYER1", " layer1", "layer1\x00",
]  # fmt: skip
key_values = clean(
    st.one_of(
        st.sampled_from(KEYS + ODD_KEYS),
        mutated(KEYS, SPEC_ATOMS + NAME_ATOMS),
        st.text(max_size=12),
    )
)


@fuzz(50)
@given(key=key_values, target=st.sampled_from(["folder", "safetensors"]), json_out=st.booleans())
def test_show_key(scratch: Path, captured: Path, key: str, target: str, json_out: bool) -> None:
    """``--key`` names a tensor of the capture: never a file beside it (``../x`` is a real tensor file)."""
    before = {n: (captured / n).stat().st_mtime_ns for n in files_under(captured)}
    picture = new_dir(scratch) / "k.png"
    source = captured if target == "folder" else captured / "tensors.safetensors"
    args = ["show", str(source), "--key", key, "-o", str(picture)] + (["--json"] if json_out else [])
    result = run(args, json_out)
    assert result.exit_code == (0 if key in ("act1", "layer1") else 4 if key == "fc" else 2), result.stderr
    assert picture.exists() == (result.exit_code == 0)
    assert {n: (captured / n).stat().st_mtime_ns for n in files_under(captured)} == before


MANIFEST_FILES = [
    "../x.npy",
    "..",
    ".",
    "",
    "/etc/passwd",
    "cap/../../x.npy",
    "x.npy",
    "act1.npy\x00",
    "act1.npy",
]


@fuzz(40)
@given(
    file=st.one_of(
        st.sampled_from(MANIFEST_FILES), mutated(MANIFEST_FILES, NAME_ATOMS), st.integers(), st.none()
    ),
    entry=st.integers(0, 8),
    command=st.sampled_from(["show", "stats", "report", "hookdump.open"]),
)
def test_manifest_file_names(scratch: Path, captured: Path, file: object, entry: int, command: str) -> None:
    """A hand-edited manifest naming a file outside its folder: refused, never read (``x.npy`` beside the
    copy has a shape of its own)."""
    folder = new_dir(scratch)
    copy = folder / "cap"
    shutil.copytree(captured, copy)
    np.save(folder / "x.npy", np.full(BAIT, 7, np.float32))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["tensors"][entry % len(manifest["tensors"])]["file"] = file
    (copy / "manifest.json").write_text(json.dumps(manifest))
    if command == "hookdump.open":
        try:
            shapes = [tuple(array.shape) for array in hookdump.open(copy).values()]
        except HookdumpError as exc:
            assert exc.exit_code in DOCUMENTED, exc.paragraph()
            shapes = []
    else:
        result = run([command, str(copy), "--json"], json_out=True)
        found = json.loads(result.stdout) if result.exit_code == 0 else []
        shapes = [tuple(r["shape"]) for r in (found if isinstance(found, list) else [found]) if "shape" in r]
    assert BAIT not in shapes, f"{file!r} led out of the capture folder"
