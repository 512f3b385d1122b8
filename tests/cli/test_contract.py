"""hookdump in shell scripts and CI: the presets in configs/, --config, JSON everywhere, exit codes a script
can trust, help for every option, the example CI script."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import forkrun
import numpy as np
import pytest
import timm
import typer
from common import CHECKOUT, PLUGINS, inputs_of
from helpers import IMAGENET_CATS

from hookdump.cli.app import app

ROOT = CHECKOUT
CONFIGS = ROOT / "configs"
EXE = shutil.which("hookdump", path=str(Path(sys.executable).parent))


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _shapes(out: Path) -> dict[str, list[int]]:
    return {t["file"]: t["shape"] for t in _manifest(out)["tensors"]}


# --- the presets, each run as shipped --------------------------------------------------------------------


def test_preset_twins_pos_block_is_the_seed_job(cli, tmp_path: Path) -> None:
    result = cli("capture", "--config", CONFIGS / "twins-pos-block.toml", "-o", tmp_path / "o")
    assert result.exit_code == 0, result.stderr
    assert _shapes(tmp_path / "o") == {"pos_block.3.proj.0.npy": [1, 1024, 7, 7]}
    assert _manifest(tmp_path / "o")["model"]["timm_name"] == "twins_svt_large"


def test_preset_resnet_stages_over_a_folder(cli, tmp_path: Path, photos: Path) -> None:
    shipped = cli("capture", "--config", CONFIGS / "resnet-stages.toml", "-o", tmp_path / "o")
    assert shipped.exit_code == 0, shipped.stderr
    assert [Path(i["path"]).name for i in inputs_of(tmp_path / "o")] == ["sample.jpg"]
    # folders on the command line replace the preset's; shapes from timm's own feature_info
    mine = cli("capture", "--config", CONFIGS / "resnet-stages.toml", photos, "-o", tmp_path / "mine")
    assert mine.exit_code == 0, mine.stderr
    info = timm.create_model("resnet50", features_only=True).feature_info
    expected = {
        f"layer{i}.npy": [3, ch, 224 // red, 224 // red]
        for i, (ch, red) in enumerate(zip(info.channels()[1:], info.reduction()[1:], strict=True), start=1)
    }
    assert _shapes(tmp_path / "mine") == expected


def test_preset_vit_blocks_with_inputs(cli, tmp_path: Path) -> None:
    result = cli("capture", "--config", CONFIGS / "vit-blocks.toml", "-o", tmp_path / "o")
    assert result.exit_code == 0, result.stderr
    model = timm.create_model("vit_small_patch16_224")
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    expected = {}
    for i in range(len(model.blocks)):
        expected[f"blocks.{i}.in0.npy"] = expected[f"blocks.{i}.npy"] = [1, tokens, model.embed_dim]
    assert _shapes(tmp_path / "o") == expected


def test_preset_dataset_features_pooled_for_a_probe(cli, tmp_path: Path, photos: Path) -> None:
    (photos / "broken.png").write_text("not a picture")
    out = tmp_path / "o"
    result = cli("capture", "--config", CONFIGS / "dataset-features.toml", photos, "-o", out)
    assert result.exit_code == 0, result.stderr
    import hookdump

    feats = hookdump.open(out)
    channels = timm.create_model("resnet50", features_only=True).feature_info.channels()[1:]
    assert [tuple(feats[f"layer{i}"].shape) for i in range(1, 5)] == [(3, c) for c in channels]
    assert all(feats[k].dtype == np.float16 for k in feats)
    assert [Path(s["path"]).name for s in feats.manifest["skipped"]] == ["broken.png"]


def test_preset_efficientnet_lite0_with_real_weights(cli, tmp_path: Path, lite0_checkpoint: Path) -> None:
    out = tmp_path / "o"
    result = cli(
        "capture",
        "--config",
        CONFIGS / "efficientnet-lite0.toml",
        "--checkpoint",
        lite0_checkpoint,
        "-o",
        out,
    )
    assert result.exit_code == 0, result.stderr
    shapes = _shapes(out)
    assert shapes["classifier.npy"] == shapes["classifier.grad.npy"] == [1, 1000]
    assert shapes["conv_head.npy"] == shapes["conv_head.grad.npy"] == [1, 1280, 7, 7]
    assert int(np.load(out / "classifier.npy").argmax()) in IMAGENET_CATS
    assert _manifest(out)["grad"]["classes"][0] in IMAGENET_CATS


# --- --config, flags over the file, manifests, --print-config -----------------------------------------------


def test_flags_given_beat_the_file(cli, tmp_path: Path) -> None:
    result = cli(
        "capture", "--config", CONFIGS / "twins-pos-block.toml", "-l", "pos_block.2.proj.0", "--dry-run"
    )
    assert result.exit_code == 0, result.stderr
    assert "pos_block.2.proj.0" in result.stdout and "pos_block.3" not in result.stdout


def test_a_manifest_reruns_its_capture_byte_for_byte(cli, tmp_path: Path, photos: Path) -> None:
    first = tmp_path / "first"
    args = ("-m", "test_resnet", "-l", "layer*", photos, "--batch-size", "2", "--what", "both", "--seed", "3")
    assert cli("capture", *args, "-o", first).exit_code == 0
    again = tmp_path / "again"
    result = cli("capture", "--config", first / "manifest.json", "-o", again)
    assert result.exit_code == 0, result.stderr
    assert _manifest(again)["options"] == {**_manifest(first)["options"], "out": str(again)}
    files = sorted(p.name for p in first.glob("*.npy"))
    assert files and files == sorted(p.name for p in again.glob("*.npy"))
    for name in files:
        assert (first / name).read_bytes() == (again / name).read_bytes()


def test_print_config_turns_a_command_line_into_a_file(cli, tmp_path: Path) -> None:
    args = ("-m", "test_resnet", "-l", "layer1", "-l", "conv1.0", "--random-input", "--batch-size", "4")
    printed = cli("capture", *args, "--print-config")
    assert printed.exit_code == 0 and printed.stdout.startswith("[capture]\n")
    assert 'layer = ["layer1", "conv1.0"]' in printed.stdout and "batch_size = 4" in printed.stdout
    saved = tmp_path / "mine.toml"
    saved.write_text(printed.stdout)
    from_line = cli("capture", *args, "--dry-run", "--json")
    from_file = cli("capture", "--config", saved, "--dry-run", "--json")
    assert from_file.exit_code == 0, from_file.stderr
    assert json.loads(from_file.stdout) == json.loads(from_line.stdout)
    listed = cli("list-modules", "test_resnet", "--depth", "1", "--print-config")
    assert listed.stdout.splitlines()[:3] == ["[list-modules]", 'model = "test_resnet"', "depth = 1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[capture]\nbatchsize = 4\n", "c.toml, line 2: unknown key `batchsize` in [capture]"),
        ("[capture]\nbatch_size = 'four'\n", "c.toml, line 2: `batch_size` must be an integer"),
        ("[capture\n", "c.toml, line 1"),
    ],
)
def test_bad_config_files_are_input_errors_naming_the_line(
    cli, tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "c.toml").write_text(text)
    result = cli("capture", "--config", tmp_path / "c.toml", "--json")
    assert result.exit_code == 4, result.stderr
    assert message in result.stderr
    assert json.loads(result.stdout)["kind"] == "input"


# --- JSON everywhere, exit codes, through the installed console script -----------------------------------


def _run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert EXE is not None, "the console script is installed with the package"
    return forkrun.run(args, timeout=300, env={**os.environ, **(env or {})})


def _errors(tmp_path: Path) -> list[tuple[tuple[str | Path, ...], int, str, str]]:
    tiny = ("capture", "-m", "test_resnet")
    odd = ("capture", "--import", PLUGINS / "odd_plugin.py", "-m", "fragile_net", "--input-size", "3,8,8")
    return [
        ((*tiny, "-l", "conv1", "--random-input", "--batch-size", "ten"), 2, "usage", "--batch-size"),
        ((*tiny, "-l", "conv1", "--random-input", "--nope"), 2, "usage", "No such option"),
        ((*tiny, "-l", "conv1"), 2, "usage", "No input given"),
        ((*tiny, "-l", "layer9", "--random-input"), 3, "layer", "`layer9` is not a module"),
        (("list-modules", "no_such_model"), 4, "input", "Unknown model `no_such_model`"),
        ((*tiny, "-l", "conv1", tmp_path / "missing.png"), 4, "input", "missing.png` does not exist"),
        ((*odd, "-l", "conv", "--random-input", "--no-early-stop"), 1, "unexpected", "this model is broken"),
        (("show", tmp_path / "missing.npy"), 4, "input", "missing.npy` does not exist"),
    ]  # fmt: skip


def test_every_kind_of_error_has_its_exit_code_a_paragraph_and_a_json_object(tmp_path: Path) -> None:
    for args, code, kind, text in _errors(tmp_path):
        extra = ("-o", tmp_path / "out", "--json") if args[0] == "capture" else ("--json",)
        proc = _run(*args, *extra)
        assert proc.returncode == code, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and text in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "╭" not in proc.stderr
        error = json.loads(proc.stdout)
        assert sorted(error) == ["error", "exit_code", "hint", "kind", "schema_version"]
        assert (error["kind"], error["exit_code"], error["schema_version"]) == (kind, code, 1)
        assert text in error["error"] + (error["hint"] or "")
        assert not (tmp_path / "out").exists()


def test_json_on_every_command_is_one_document_on_stdout(tmp_path: Path) -> None:
    out = tmp_path / "o"
    captured = _run("capture", "-m", "test_resnet", "-l", "layer1", "--sample", "-o", out, "--json")
    assert captured.returncode == 0, captured.stderr
    assert json.loads(captured.stdout)["schema_version"] == 2
    shown = _run("show", out / "layer1.npy", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["path"] == str(out / "layer1.png")
    listed = _run("list-modules", "test_resnet", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["name"] == "conv1"
    dry = _run(
        "capture",
        "-m",
        "test_resnet",
        "-l",
        "layer1",
        "--sample",
        "--dry-run",
        "--json",
        "-o",
        tmp_path / "d",
    )
    assert dry.returncode == 0 and json.loads(dry.stdout)[0]["name"] == "layer1"


def test_version_module_entry_and_completion() -> None:
    from hookdump.version import __version__

    assert _run("--version").stdout == f"hookdump {__version__}\n"
    module = subprocess.run(
        [sys.executable, "-m", "hookdump", "--version"], capture_output=True, text=True, timeout=60
    )
    assert module.stdout == f"hookdump {__version__}\n"
    # from a shell, as a user types it: the shell is found among the process's parents (a test run whose
    # parents hold no shell, e.g. one left running in the background, found none: "Shell  not supported")
    command = f"{shlex.quote(str(EXE))} --show-completion"
    completion = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert completion.returncode == 0 and "_hookdump_completion" in completion.stdout


def test_colour_only_on_a_terminal_or_when_forced(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    ansi = re.compile(r"\x1b\[")
    for env, coloured in (
        ({}, False),
        ({"FORCE_COLOR": "1"}, True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
    ):
        for key in ("FORCE_COLOR", "NO_COLOR"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        result = cli("list-modules", "test_resnet", "--depth", "1")
        assert result.exit_code == 0 and bool(ansi.search(result.stdout)) is coloured, env


# --- help and the README ------------------------------------------------------------------------------------

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # the README and the pages it links to


def test_every_command_and_option_has_help_and_is_in_the_readme() -> None:
    """Every command is shown, and every option of every command named, in the README or a page of docs/."""
    readme = "\n".join(page.read_text() for page in DOCS)
    group = typer.main.get_command(app)
    assert group.commands, "no commands"
    for name, command in group.commands.items():
        assert command.help, name
        assert f"hookdump {name}" in readme, f"neither README nor docs/ shows `hookdump {name}`"
        for param in command.params:
            if param.name in ("help", "ctx"):
                continue
            assert getattr(param, "help", None), f"{name} {param.name} has no help"
            for opt in [o for o in param.opts if o.startswith("--")] + list(param.secondary_opts):
                assert f"`{opt}" in readme or f"{opt}`" in readme or f"{opt}/" in readme, (
                    f"{name} {opt} not in README or docs/"
                )


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a page (fenced blocks left out)."""
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    slugs = [
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"(?m)^#+ (.*)$", text)
    ]
    return {s if not slugs[:i].count(s) else f"{s}-{slugs[:i].count(s)}" for i, s in enumerate(slugs)}


def test_the_readme_names_no_file_outside_the_repository() -> None:
    """No page names a file outside the checkout (the README once named ``../shared/DESIGN.md``), and every
    relative link and image of the README, docs/*.md and CHANGELOG.md leads to a file (and heading) there."""
    assert "../" not in (ROOT / "README.md").read_text()
    for page in [*DOCS, ROOT / "CHANGELOG.md"]:
        text = page.read_text()
        links = re.compile(r"\]\(([^)\s]+)\)|src=\"([^\"]+)\"")
        for target in (a or b for a, b in links.findall(text)):
            if "://" in target:
                continue
            name, _, anchor = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            assert path.is_relative_to(ROOT) and path.is_file(), (
                f"{page.name} links to {target}: no such file"
            )
            assert not anchor or anchor in _anchors(path), f"{page.name} links to {target}: no such heading"
        assert "../" not in links.sub("", text), f"{page.name} names a path outside the checkout"
