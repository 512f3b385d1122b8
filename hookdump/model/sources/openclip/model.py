"""The record of one ``open_clip:ARCH[:TAG]`` model (its architecture, tag and the configs they give), read
off the name against open_clip's architectures and tags with each ``--model-arg`` applied; what the manifest
says of it, and the line that names it; and ``open_clip``, or the error naming the extra that installs it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ....errors import InputError, UsageError, did_you_mean
from ... import extras
from ...spec import ModelSpec, ResolvedName

PREFIX = "open_clip:"
TOWER = "visual"
#: The CLIP config's keys a ``--model-arg`` may set besides the vision config's own.
MODEL_KEYS = ("embed_dim", "quick_gelu")


def open_clip_module() -> Any:
    """``open_clip``, or the error naming the extra that installs it."""
    return extras.need("open_clip", "open_clip: models", "open_clip", "open_clip_torch")


@dataclass
class OpenCLIPModel:
    """One ``open_clip:`` model: its architecture, pretrained tag, and the configs they give."""

    spec: ModelSpec
    arch: str
    tag: str | None
    config: dict[str, Any]  # the CLIP model config, with the --model-arg values applied
    tag_config: dict[str, Any] = field(default_factory=dict)

    @property
    def vision(self) -> dict[str, Any]:
        return dict(self.config["vision_cfg"])

    @property
    def quick_gelu(self) -> bool:
        return bool(self.config.get("quick_gelu", False) or self.tag_config.get("quick_gelu", False))


def resolve(spec: ModelSpec) -> OpenCLIPModel:
    """``open_clip:ARCH[:TAG]`` checked against open_clip's architectures and tags (no weights read)."""
    oc = open_clip_module()
    arch, _, tag = spec.name[len(PREFIX) :].partition(":")
    if not arch:
        raise UsageError(
            f"`-m {spec.name}` names no architecture.",
            "Pass one of open_clip.list_models(), e.g. -m open_clip:ViT-B-32 (or open_clip:ViT-B-32:TAG).",
        )
    config = oc.get_model_config(arch)
    if config is None:
        close = did_you_mean(arch, list(oc.list_models()))
        close = close.replace("Did you mean: ", "Did you mean: open_clip:").replace(", ", ", open_clip:")
        raise InputError(
            f"Unknown model `{spec.name}`: open_clip has no architecture `{arch}`.",
            f"{close} `python -c 'import open_clip; print(open_clip.list_models())'` lists them.".strip(),
        )
    tags = list(oc.list_pretrained_tags_by_model(arch))
    if tag and not oc.get_pretrained_cfg(arch, tag):
        raise InputError(
            f"Model `{spec.name}`: open_clip has no pretrained tag `{tag}` for {arch}.",
            f"Its tags: {', '.join(tags)}." if tags else f"open_clip has no pretrained weights for {arch}.",
        )
    if spec.pretrained and not tag and spec.checkpoint is None:
        listed = ", ".join(f"open_clip:{arch}:{t}" for t in tags[:4])
        raise UsageError(
            f"--pretrained: `{spec.name}` names no pretrained tag, and {arch} has "
            + (f"{len(tags)}." if tags else "none in open_clip."),
            (f"Name one: -m {listed} (open_clip.list_pretrained() lists them)." if tags else "")
            + " Or pass --checkpoint PATH, or leave --pretrained out for random weights.",
        )
    found = OpenCLIPModel(spec, arch, tag or None, _with_args(config, spec), {})
    if tag:
        found.tag_config = dict(oc.get_pretrained_cfg(arch, tag))
    return found


def _with_args(config: dict[str, Any], spec: ModelSpec) -> dict[str, Any]:
    """The CLIP config with each ``--model-arg`` applied: a key of the vision config (``layers=2``), or
    ``embed_dim`` / ``quick_gelu``."""
    from open_clip.model import CLIPVisionCfg  # the optional extra, imported where used (resolve checked it)

    config = {**config, "vision_cfg": dict(config["vision_cfg"])}
    allowed = [f.name for f in fields(CLIPVisionCfg)]
    for key, value in spec.model_args.items():
        if key in MODEL_KEYS:
            config[key] = value
        elif key in allowed:
            config["vision_cfg"][key] = value
        else:
            raise UsageError(
                f"--model-arg {key}: open_clip's vision config (CLIPVisionCfg) has no `{key}`.",
                f"It takes {', '.join(allowed)}; and {', '.join(MODEL_KEYS)}.",
            )
    return config


def record(found: OpenCLIPModel) -> dict[str, Any]:
    """What the manifest's ``model`` says of an ``open_clip:`` model."""
    return {
        "source": "open_clip",
        "open_clip": found.arch,
        "tag": found.tag,
        "open_clip_version": open_clip_module().__version__,
        "quick_gelu": found.quick_gelu,
        "tower": TOWER,
    }


def name(found: OpenCLIPModel) -> ResolvedName:
    kind = "the image tower of open_clip's " + found.arch + (f" ({found.tag})" if found.tag else "")
    return ResolvedName(found.spec.name, None, [f"model {found.spec.name} is {kind}, under `{TOWER}`"])
