"""hookdump.cli.config on real files: keys from the real commands, tables, types, paths, manifests, TOML
out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer._click import Command

from hookdump.cli import app as cli
from hookdump.cli import config, config_print
from hookdump.errors import EXIT_INPUT, InputError

GROUP = typer.main.get_command(cli.app)
CAPTURE: Command = GROUP.commands["capture"]  # type: ignore[attr-defined]
LIST: Command = GROUP.commands["list-modules"]  # type: ignore[attr-defined]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def error(path: Path, command: Command = CAPTURE, name: str = "capture") -> InputError:
    with pytest.raises(InputError) as caught:
        config.load(path, command, name)
    assert caught.value.exit_code == EXIT_INPUT
    return caught.value


def test_capture_keys_from_the_real_command() -> None:
    keys = {key: param.name for key, param in config.config_keys(CAPTURE).items()}
    renamed = {"format": "fmt", "import": "imports", "json": "json_out", "compile": "compile_model"}
    assert {k: keys[k] for k in renamed} == renamed
    assert all(key == name for key, name in keys.items() if key not in renamed)
    # every option a manifest records is a key, so `--config manifest.json` reruns it
    from hookdump.capture.header import options_record
    from hookdump.capture.options import CaptureOptions
    from hookdump.inputs.spec import InputSpec
    from hookdump.model.spec import ModelSpec

    recorded = options_record(InputSpec(), [], ModelSpec(), CaptureOptions(compile=True))
    assert set(recorded) <= set(keys), set(recorded) - set(keys)
    assert "compile" in recorded and "compile" not in options_record(
        InputSpec(), [], ModelSpec(), CaptureOptions()
    )


def test_list_modules_keys_leave_out_the_positional_model() -> None:
    keys = {key: param.name for key, param in config.config_keys(LIST).items()}
    assert keys == {
        "model": "model", "import": "imports", "model_arg": "model_arg", "input_size": "input_size",
        "depth": "depth", "filter": "pattern", "leaves": "leaves", "no_shapes": "no_shapes", "ops": "ops",
        "json": "json_out",
    }  # fmt: skip


def test_command_table_wins_over_top_level_and_other_table_is_ignored(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "hookdump.toml",
        'model = "twins_svt_small"\nbatch_size = 4\nseed = 1\n'
        '[capture]\nbatch_size = 8\nlayer = ["blocks.0.0.attn"]\n'
        '[list-modules]\ndepth = "not checked for capture"\nbatch_size = 99\n',
    )
    assert config.load(cfg, CAPTURE, "capture") == {
        "model": "twins_svt_small", "batch_size": 8, "seed": 1, "layer": ["blocks.0.0.attn"],
    }  # fmt: skip
    # the same file for list-modules: its own table is checked, top-level keys it lacks are errors
    assert error(cfg, LIST, "list-modules").message == (
        f"{cfg}, line 2: unknown key `batch_size` for hookdump list-modules."
    )
    both = write(tmp_path / "both.toml", 'model = "a"\n[capture]\nlayer = "x"\n[list_modules]\ndepth = 2\n')
    assert config.load(both, LIST, "list-modules") == {"model": "a", "depth": 2}
    assert config.load(both, CAPTURE, "capture") == {"model": "a", "layer": ["x"]}
    twice = write(tmp_path / "twice.toml", "[list-modules]\ndepth = 1\n[list_modules]\ndepth = 2\n")
    assert error(twice, LIST, "list-modules").message == (
        f"{twice}: both [list-modules] and [list_modules] are there."
    )


def test_unknown_keys(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", 'model = "x"\nbatchsize = 3\n')
    found = error(cfg)
    assert found.message == f"{cfg}, line 2: unknown key `batchsize` for hookdump capture."
    assert found.hint == "Did you mean: batch_size?"
    cfg = write(tmp_path / "c.toml", "[capture]\nno_early_stop = true\n")
    found = error(cfg)
    assert found.message == f"{cfg}, line 2: unknown key `no_early_stop` in [capture] for hookdump capture."
    assert found.hint == "Did you mean: early_stop?"
    cfg = write(tmp_path / "c.toml", "[show]\nalpha = 0.5\n")
    found = error(cfg)
    assert found.message == f"{cfg}: unknown key `show` for hookdump capture."
    assert found.hint is not None and found.hint.startswith("Valid keys: images, layer, model, import, ")


@pytest.mark.parametrize(
    ("line", "message", "hint"),
    [
        ('batch_size = "16"', '`batch_size` must be an integer, not a string ("16").', "e.g. batch_size = 1"),
        (
            "batch_size = true",
            "`batch_size` must be an integer, not a boolean (true).",
            "e.g. batch_size = 1",
        ),
        ("seed = 1.5", "`seed` must be an integer, not a number (1.5).", "e.g. seed = 1"),
        (
            'early_stop = "true"',
            '`early_stop` must be true or false, not a string ("true").',
            "e.g. early_stop = true",
        ),
        ("layer = 3", "`layer` must be a list of strings, not an integer (3).", 'e.g. layer = ["..."]'),
        ('layer = ["a", 1]', "`layer` must be a list of strings, not a list.", 'e.g. layer = ["..."]'),
        ("out = 3", "`out` must be a string, not an integer (3).", 'e.g. out = "..."'),
        ("images = {a = 1}", "`images` must be a list of strings, not a table.", 'e.g. images = ["..."]'),
    ],
)
def test_wrong_types_name_key_file_and_line(tmp_path: Path, line: str, message: str, hint: str) -> None:
    cfg = write(tmp_path / "c.toml", f'# comment\nmodel = "x"\n{line}\n')
    found = error(cfg)
    assert (found.message, found.hint) == (f"{cfg}, line 3: {message}", hint)


def test_single_string_becomes_a_list_and_ranges_are_checked(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", 'layer = "blocks.0"\nimport = "my_plugin"\n')
    assert config.load(cfg, CAPTURE, "capture") == {"layer": ["blocks.0"], "imports": ["my_plugin"]}
    cfg = write(tmp_path / "l.toml", "[list-modules]\ndepth = 0\n")
    assert error(cfg, LIST, "list-modules").message == f"{cfg}, line 2: `depth` = 0 is not in the range x>=1."


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", 'model = "x"\nbatch_size 16\n')
    found = error(cfg)
    assert found.message == (
        f"{cfg}, line 2, column 12: invalid TOML: Expected '=' after a key in a key/value pair."
    )


def test_missing_unreadable_and_folder(tmp_path: Path) -> None:
    assert error(tmp_path / "nope.toml").message == f"Config file {tmp_path / 'nope.toml'} does not exist."
    assert error(tmp_path).message == f"{tmp_path} is a folder, not a config file."
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"model = '\xff'\n")
    assert error(binary).message == f"{binary} is not UTF-8 text."


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    cfg = write(
        folder / "cfg" / "hookdump.toml",
        '[capture]\ncheckpoint = "weights/lite0.safetensors"\nout = "../runs/out"\n'
        f'images = ["cat.png", "@list.txt", "photos/**/*.png", "{tmp_path}/abs.png", "~/home.png"]\n'
        'import = ["plugins/lenet.py", "lenet.py", "my_plugin", "pkg.models"]\n',
    )
    here = folder / "cfg"
    assert config.load(cfg, CAPTURE, "capture") == {
        "checkpoint": str(here / "weights" / "lite0.safetensors"),
        "out": str(folder / "runs" / "out"),
        "images": [
            str(here / "cat.png"), f"@{here / 'list.txt'}", f"{here}/photos/**/*.png",
            f"{tmp_path}/abs.png", os.path.expanduser("~/home.png"),
        ],
        "imports": [str(here / "plugins" / "lenet.py"), str(here / "lenet.py"), "my_plugin", "pkg.models"],
    }  # fmt: skip


def manifest(folder: Path, options: dict[str, Any], **top: Any) -> Path:
    return write(folder / "manifest.json", json.dumps({"hookdump_version": "0", **top, "options": options}))


def test_manifest_options_relative_to_its_cwd(tmp_path: Path) -> None:
    run = tmp_path / "run"
    options = {
        "images": ["photos", "@list.txt"], "layer": ["pos_block.*.proj.0"], "model": "alt_gvt_large",
        "import": ["plugins/p.py", "mod"], "checkpoint": None, "format": "npy", "batch_size": 16,
        "seed": 0, "out": "hookdump-out", "early_stop": False, "input_size": "3,224,224", "target": None,
    }  # fmt: skip
    path = manifest(run / "hookdump-out", options, cwd=str(run))
    expected = {
        "images": [str(run / "photos"), f"@{run / 'list.txt'}"], "layer": ["pos_block.*.proj.0"],
        "model": "alt_gvt_large", "imports": [str(run / "plugins" / "p.py"), "mod"], "fmt": "npy",
        "batch_size": 16, "seed": 0, "out": str(run / "hookdump-out"), "early_stop": False,
        "input_size": "3,224,224",
    }  # fmt: skip
    assert config.load(path, CAPTURE, "capture") == expected
    assert config.load(path.parent, CAPTURE, "capture") == expected  # the capture folder itself
    assert config.load(path, LIST, "list-modules") == {
        "model": "alt_gvt_large", "imports": [str(run / "plugins" / "p.py"), "mod"],
        "input_size": "3,224,224",
    }  # fmt: skip
    bad = manifest(tmp_path / "bad", {"batch_size": "16", "extra": 1}, cwd=str(run))
    assert error(bad).message == f'{bad} ("options"): `batch_size` must be an integer, not a string ("16").'
    bad = manifest(tmp_path / "bad", {"batchsize": 16}, cwd=str(run))
    assert error(bad).message == f'{bad} ("options"): unknown key `batchsize` for hookdump capture.'
    no_cwd = manifest(tmp_path / "nocwd", {"seed": 1})
    assert error(no_cwd).message == f'{no_cwd}: the manifest has no "cwd" (the folder the capture ran in).'


def test_json_that_is_not_a_manifest(tmp_path: Path) -> None:
    for text in ('{"tensors": []}', "[1, 2]", '{"options": [1]}'):
        path = write(tmp_path / "data.json", text)
        found = error(path)
        assert found.message == f'{path} is not a hookdump manifest: it has no "options" object.'
    path = write(tmp_path / "broken.json", '{\n  "options": {,}\n}')
    assert (
        error(path).message
        == f"{path}, line 2: invalid JSON: Expecting property name enclosed in double quotes."
    )


def test_early_stop_false_maps_onto_the_flag_pair_and_the_command_line_wins(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", "early_stop = false\nbatch_size = 8\n")
    defaults = config.load(cfg, CAPTURE, "capture")
    assert defaults == {"early_stop": False, "batch_size": 8}
    params = CAPTURE.make_context("capture", [], default_map=defaults).params
    assert (params["early_stop"], params["batch_size"]) == (False, 8)
    params = CAPTURE.make_context(
        "capture", ["--early-stop", "--batch-size", "2"], default_map=defaults
    ).params
    assert (params["early_stop"], params["batch_size"]) == (True, 2)


def test_to_toml_round_trip(tmp_path: Path) -> None:
    args = [
        f"{tmp_path}/photos", f"@{tmp_path}/list.txt", "-l", r"re:^blocks\.0\.\d+\.attn$",
        "-l", 'odd "name"\twith\\tab', "-m", "twins_svt_small", "--import", f"{tmp_path}/p.py",
        "--import", "mod", "--checkpoint", f"{tmp_path}/w.pth", "-o", f"{tmp_path}/out", "--no-early-stop",
        "--batch-size", "3", "--format", "npy,pt", "--json", "--input-size", "3,32,32",
    ]  # fmt: skip
    given = CAPTURE.make_context("capture", args).params
    text = config_print.to_toml(given, CAPTURE, "capture")
    assert text.splitlines()[:4] == [
        "[capture]",
        f'images = ["{tmp_path}/photos", "@{tmp_path}/list.txt"]',
        r'layer = ["re:^blocks\\.0\\.\\d+\\.attn$", "odd \"name\"\twith\\tab"]',
        'model = "twins_svt_small"',
    ]
    assert "early_stop = false" in text and "json = true" in text and "target" not in text
    cfg = write(tmp_path / "elsewhere" / "printed.toml", text)
    again = CAPTURE.make_context("capture", [], default_map=config.load(cfg, CAPTURE, "capture")).params
    assert again == given
    listed = LIST.make_context("list-modules", ["--depth", "2", "--leaves", "--filter", "blocks.*"]).params
    text = config_print.to_toml(listed, LIST, "list-modules")
    assert text == (
        '[list-modules]\ndepth = 2\nfilter = "blocks.*"\nleaves = true\nno_shapes = false\nops = false\n'
        "json = false\n"
    )
    cfg = write(tmp_path / "l.toml", text)
    assert (
        LIST.make_context("list-modules", [], default_map=config.load(cfg, LIST, "list-modules")).params
        == listed
    )


def test_to_toml_writes_command_line_paths_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    given = CAPTURE.make_context("capture", ["cat.png", "-o", "out", "--import", "p.py"]).params
    text = config_print.to_toml(given, CAPTURE, "capture")
    assert f'images = ["{tmp_path}/cat.png"]' in text
    assert f'import = ["{tmp_path}/p.py"]' in text and f'out = "{tmp_path}/out"' in text
    cfg = write(tmp_path / "sub" / "printed.toml", text)
    again = CAPTURE.make_context("capture", [], default_map=config.load(cfg, CAPTURE, "capture")).params
    assert (again["images"], again["out"]) == ([str(tmp_path / "cat.png")], str(tmp_path / "out"))
