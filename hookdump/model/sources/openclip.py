"""The image tower of an OpenCLIP model as ``open_clip:ARCH`` or ``open_clip:ARCH:TAG`` (``open_clip``'s
own ``list_pretrained(as_str=True)`` names): the tower alone, built from the architecture's config (the text
tower is never made), under ``visual`` as in the CLIP model (``visual.transformer.resblocks.5``), so the
output of ``visual`` is ``encode_image``. Weights: seeded random ones, a ``--checkpoint`` (a CLIP state
dict, whose ``visual.`` tensors are taken, or the tower's own), or ``--pretrained`` with a tag (open_clip's
download, or its cache). The eval transform is open_clip's for that architecture and tag."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...errors import InputError, UsageError, did_you_mean
from .. import extras, featlevels
from ..checkpoints import check_fits, read_checkpoint
from ..meta import SkipValueWrites
from ..spec import ModelSpec, ResolvedName
from ..weights import build_uninitialised, check_hookable, check_weights
from .base import Source

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


class ImageTower(nn.Module):
    """An OpenCLIP image tower under ``visual``, as in the CLIP model: its output is ``encode_image``."""

    def __init__(self, visual: nn.Module) -> None:
        super().__init__()
        self.visual = visual

    def forward(self, image: torch.Tensor) -> Any:
        return self.visual(image)


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


def _tower(found: OpenCLIPModel) -> nn.Module:
    from open_clip.model import _build_vision_tower  # the optional extra, imported where used

    visual: nn.Module = _build_vision_tower(found.config["embed_dim"], found.vision, found.quick_gelu)
    return ImageTower(visual)


def _built(found: OpenCLIPModel, make: Any) -> nn.Module:
    try:
        return make()  # type: ignore[no-any-return]
    except Exception as exc:
        raise InputError(
            f"open_clip's image tower of `{found.spec.name}` could not be built: {type(exc).__name__}: {exc}",
            "Check the --model-arg values: they are keys of open_clip's CLIPVisionCfg (layers, width,"
            " patch_size, image_size, ...)."
            if found.spec.model_args
            else "This is an error in open_clip's model code; HOOKDUMP_DEBUG=1 shows the traceback.",
        ) from exc


def build_meta(found: OpenCLIPModel) -> nn.Module:
    """The tower on the meta device, without its weight init."""
    with torch.device("meta"), SkipValueWrites():
        return facts(_built(found, lambda: _tower(found)))


def load(found: OpenCLIPModel) -> tuple[nn.Module, list[str]]:
    """The real tower on the CPU with its weights, and what to say about them."""
    spec = found.spec
    if spec.pretrained and spec.checkpoint is None:
        return facts(_pretrained(found)), [f"weights: open_clip's {found.arch}:{found.tag} (image tower)"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        if spec.checkpoint is None:
            model = _built(found, lambda: _tower(found))
        else:
            model = _built(found, lambda: build_uninitialised(lambda: _tower(found)))
    check_hookable(model, spec.name)
    if spec.checkpoint is None:
        return facts(model.eval()), [
            f"weights: random init from --seed {spec.seed} (pass --checkpoint PATH, or a tag with"
            " --pretrained, for trained weights)"
        ]
    state, dropped = tower_state(read_checkpoint(spec.checkpoint), model)
    check_fits(state, model, spec.checkpoint, spec.name)
    model.load_state_dict(state, strict=True)
    note = f"weights: {spec.checkpoint} (image tower)"
    if dropped:
        note += f"; {dropped} tensor(s) of the text tower and the rest of the CLIP model were left out"
    return facts(model.eval()), [note]


def tower_state(state: dict[str, torch.Tensor], model: nn.Module) -> tuple[dict[str, torch.Tensor], int]:
    """The image tower's tensors of a checkpoint: a CLIP state dict's ``visual.`` ones (and how many others
    it had), or a state dict of the tower alone, put under ``visual.``."""
    ours = f"{TOWER}."
    if any(k.startswith(ours) for k in state):
        tower = {k: v for k, v in state.items() if k.startswith(ours)}
        return tower, len(state) - len(tower)
    own = {k[len(ours) :] for k in model.state_dict()}
    if own & set(state):
        return {ours + k: v for k, v in state.items()}, 0
    return state, 0


def _pretrained(found: OpenCLIPModel) -> nn.Module:
    """open_clip's model with the tag's weights (downloaded, or from its cache), cut to its image tower."""
    oc = open_clip_module()
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    try:
        with quiet[0], quiet[1], warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger().setLevel(logging.ERROR)
            model = oc.create_model(
                found.arch, pretrained=found.tag, pretrained_text=False, force_quick_gelu=found.quick_gelu,
                **{k: v for k, v in found.spec.model_args.items() if k not in MODEL_KEYS},
            )  # fmt: skip
    except Exception as exc:
        why = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        raise InputError(
            f"Could not get open_clip's pretrained weights {found.arch}:{found.tag} ({why}).",
            "Download them once where there is network (open_clip keeps them in the Hugging Face cache,"
            " ~/.cache/huggingface, which $HF_HOME moves), or pass --checkpoint PATH: a state dict of the"
            " CLIP model (torch.save(model.state_dict(), 'clip.pth')) or of its image tower.",
        ) from exc
    return ImageTower(model.visual).eval()


def facts(model: nn.Module) -> nn.Module:
    """The tower's tokens and feature levels under timm's names on the wrapper (plain attributes: the state
    dict does not change): ``num_prefix_tokens`` and ``cls_token`` (the class embedding) of open_clip's
    VisionTransformer, or of the timm trunk of a timm-built tower; ``feature_info``: the transformer's
    blocks, ModifiedResNet's stages, a timm trunk's own levels."""
    visual = model.get_submodule(TOWER)
    trunk = getattr(visual, "trunk", None)
    if isinstance(trunk, nn.Module):  # a timm model inside open_clip's TimmModel
        prefix, token = getattr(trunk, "num_prefix_tokens", None), getattr(trunk, "cls_token", None)
        levels = [{**d, "module": f"{TOWER}.trunk.{d['module']}"} for d in featlevels.read(trunk) or []]
    elif hasattr(visual, "class_embedding"):  # open_clip's VisionTransformer
        prefix, token = 1, visual.class_embedding
        patch = int(getattr(visual, "patch_size", (1,))[0])
        width = int(visual.get_parameter("class_embedding").shape[-1])
        levels = featlevels.block_levels(model, f"{TOWER}.transformer.resblocks", width, patch)
    else:  # ModifiedResNet: four stages
        prefix, token = None, None
        levels = featlevels.stage_levels(model, TOWER)
    setattr(model, "feature_info", levels)  # noqa: B010  (plain attributes)
    if prefix is not None:
        setattr(model, "num_prefix_tokens", int(prefix))  # noqa: B010
    if token is not None:
        object.__setattr__(model, "cls_token", token)
    return model


def data_config(found: OpenCLIPModel) -> tuple[dict[str, Any], list[str]]:
    """open_clip's eval transform for the architecture and tag as a data config: the shorter side to the
    tower's image size then a center crop (its ``shortest`` mode), or a squash; its mean and std."""
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict  # the optional extra, where used

    cfg = merge_preprocess_dict(asdict(PreprocessCfg()), found.config.get("preprocess_cfg", {}))
    cfg = merge_preprocess_dict(cfg, found.tag_config)
    size = found.vision.get("image_size", cfg["size"])
    height, width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    label = f"open_clip's preprocess of {found.arch}" + (f":{found.tag}" if found.tag else "")
    config: dict[str, Any] = {
        "input_size": (3, height, width), "mean": tuple(cfg["mean"]), "std": tuple(cfg["std"]),
        "interpolation": str(cfg["interpolation"]), "from": label,
    }  # fmt: skip
    mode = cfg["resize_mode"]
    if mode == "shortest" and height == width:
        config |= {"resize": height, "crop_pct": 1.0, "crop_mode": "center"}
        said = f"shorter side to {height}, center crop {height}x{width}"
    elif mode == "squash":
        config |= {"crop_pct": 1.0, "crop_mode": "squash"}
        said = f"resize to {height}x{width}"
    else:
        raise InputError(
            f"{label} resizes in open_clip's `{mode}` mode at {height}x{width}, which hookdump's eval"
            " transforms (resize, center crop, normalize) do not make.",
            "In Python, pass open_clip's own preprocess: _, _, preprocess ="
            f" open_clip.create_model_and_transforms('{found.arch}'); hookdump.api.capture(..., model="
            "model.visual, transform=preprocess).",
        )
    note = (
        f"transform: {label}: {said} ({config['interpolation']}), mean"
        f" {[round(v, 4) for v in config['mean']]}, std {[round(v, 4) for v in config['std']]}"
    )
    return config, [note]


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


def checkpoint_fits(found: OpenCLIPModel, meta: nn.Module | None) -> None:
    """``--checkpoint``: a CLIP state dict or the tower's, checked on the meta tower (names and shapes)."""
    spec = found.spec
    check_weights(spec, None, spec.name)
    if spec.checkpoint is not None and meta is not None:
        state, _ = tower_state(read_checkpoint(spec.checkpoint, meta=True), meta)
        check_fits(state, meta, Path(spec.checkpoint), spec.name)


def source(spec: ModelSpec) -> Source:
    found = resolve(spec)
    return Source(
        name(found),
        build_meta=lambda: build_meta(found),
        load=lambda: load(found),
        check_weights=lambda meta: checkpoint_fits(found, meta),
        preprocess=lambda needed: data_config(found),
        record=record(found),
        rerun=spec.name,
    )
