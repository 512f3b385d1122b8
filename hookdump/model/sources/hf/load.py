"""Hugging Face transformers vision models as ``hf:ID_OR_FOLDER``: a folder ``save_pretrained`` wrote
(offline) or a hub id (the local cache when offline); ``AutoModel``, ``AutoModelForImageClassification``
where the config's ``architectures`` say so, the vision tower of CLIP / SigLIP; the folder's weights, a
``--checkpoint`` state dict onto the config's model, or seeded random weights where the folder has none."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ....digest import sha256
from ....errors import InputError, UsageError
from ... import hub
from ...spec import ModelSpec, ResolvedName
from ...weights import build_uninitialised, check_hookable, load_checkpoint
from ...weights import check_weights as check_common
from . import facts as hf_facts
from . import transform as hf_transform
from .model import HFModel, transformers_module

PREFIX = "hf:"

#: Model types whose image tower hookdump takes (the text tower never sees an image).
VISION_TOWERS = {
    "clip": "CLIPVisionModel",
    "clip_vision_model": "CLIPVisionModel",
    "siglip": "SiglipVisionModel",
    "siglip_vision_model": "SiglipVisionModel",
    "siglip2": "Siglip2VisionModel",
    "siglip2_vision_model": "Siglip2VisionModel",
}
#: Weight files ``save_pretrained`` writes, in the order transformers prefers them.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def resolve(spec: ModelSpec) -> HFModel:
    """The folder or hub id of ``spec``, its config and model class (cheap: no weights are read)."""
    tf = transformers_module()
    found = HFModel(spec, where=spec.name[len(PREFIX) :])
    if not found.where:
        raise UsageError(
            "`-m hf:` names no model.", "Pass a folder save_pretrained wrote, or a hub id: -m hf:ID."
        )
    path = Path(found.where).expanduser()
    if path.is_dir():
        found.folder = path.resolve()
    elif path.exists() or found.where.startswith((".", "/", "~")) or found.where.count("/") > 1:
        raise InputError(
            f"Model `{spec.name}`: `{found.where}` is not a folder.",
            "Pass a folder that save_pretrained wrote (config.json and model.safetensors), or a hub id such"
            " as hf:google/vit-base-patch16-224.",
        )
    config = _config(tf, found)
    found.klass, found.config = _model_class(tf, config, spec.name)
    if spec.pretrained and spec.checkpoint is None:
        found.notes.append(f"--pretrained: {spec.name} loads the weights of {found.source} (as without it)")
    found.weights = None if spec.checkpoint is not None else _weight_file(found)
    if found.weights is None and spec.checkpoint is None and spec.pretrained:
        raise InputError(
            f"`{spec.name}` has no weights ({', '.join(WEIGHT_FILES[::2])}): --pretrained cannot load them.",
            "Drop --pretrained for random weights from --seed, or save the model with save_pretrained.",
        )
    return found


def _config(tf: Any, found: HFModel) -> Any:
    try:
        return tf.AutoConfig.from_pretrained(found.source, local_files_only=found.offline)
    except (OSError, ValueError, KeyError) as exc:
        raise _not_found(found, exc) from exc


def _not_found(found: HFModel, exc: Exception) -> InputError:
    why = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    if found.folder is not None:
        return InputError(
            f"Model `{found.spec.name}`: transformers cannot read the model in {found.folder} ({why}).",
            "Pass a folder that save_pretrained wrote: it holds config.json (and model.safetensors).",
        )
    offline = hub.offline_reason() or "HF_HUB_OFFLINE=1"
    return InputError(
        f"Model `{found.spec.name}` is not in the Hugging Face cache, and the hub is not asked ({offline})"
        if found.offline
        else f"Model `{found.spec.name}`: the hub has no model `{found.where}` hookdump could read ({why}).",
        f"Where there is network, run AutoModel.from_pretrained('{found.where}').save_pretrained('FOLDER')"
        " (and AutoImageProcessor likewise) and pass -m hf:FOLDER, or fill the cache with `hf download"
        f" {found.where}`; check the id on huggingface.co.",
    )


def _model_class(tf: Any, config: Any, name: str) -> tuple[Any, Any]:
    """The class that builds the model (the vision tower of CLIP / SigLIP), and the config it takes."""
    tower = VISION_TOWERS.get(config.model_type)
    if tower is not None:
        return getattr(tf, tower), getattr(config, "vision_config", config)
    heads = [a for a in (config.architectures or []) if a.endswith("ForImageClassification")]
    auto = tf.AutoModelForImageClassification if heads else tf.AutoModel
    try:
        return auto._model_mapping[type(config)], config
    except KeyError:
        raise InputError(
            f"Model `{name}` is a `{config.model_type}` model, which transformers' {auto.__name__} does not"
            " build.",
            "hookdump takes vision models (ViT, DeiT, DINOv2, BEiT, Swin, ConvNeXt, CLIP / SigLIP towers);"
            " the Python API takes any nn.Module: hookdump.api.capture(..., model=module, transform=...).",
        ) from None


def _weight_file(found: HFModel) -> str | None:
    if found.folder is None:
        return found.where  # the hub's (cached) files
    return next((n for n in WEIGHT_FILES if (found.folder / n).is_file()), None)


def _make(found: HFModel) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        model: nn.Module = found.klass(found.config)
        return model

    return make


def facts(found: HFModel, input_size: tuple[int, ...]) -> hf_facts.Facts:
    """What a traced meta pass tells of the model (feature levels, tokens), once per model."""
    if found._facts is None or found._facts.input_size != tuple(input_size):
        with torch.device("meta"):
            probe = _make(found)()
        found._facts = hf_facts.trace(probe, tuple(input_size))
    return found._facts


def build_meta(found: HFModel) -> nn.Module:
    """The model on the meta device, as hookdump runs it (see :func:`hf_facts.prepare`)."""
    with torch.device("meta"):
        model = _make(found)()
    return _prepared(found, model)


def _prepared(found: HFModel, model: nn.Module) -> nn.Module:
    size = hf_transform.input_size(found)
    return hf_facts.prepare(model, facts(found, size), classifier=_is_classifier(found))


def _is_classifier(found: HFModel) -> bool:
    return str(getattr(found.klass, "__name__", "")).endswith("ForImageClassification")


def load(found: HFModel) -> tuple[nn.Module, list[str]]:
    """The real model on the CPU in float32 with its weights, and what to say about them."""
    spec = found.spec
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        if spec.checkpoint is not None:
            model = build_uninitialised(_make(found))
        elif found.weights is not None:
            model = _from_pretrained(found)
        else:
            model = _make(found)()
    check_hookable(model, spec.name)
    name = type(model).__name__
    if spec.checkpoint is not None:
        load_checkpoint(model, spec.checkpoint, spec.name)
        note = f"weights: {spec.checkpoint} onto {name}, built from the config of {found.source}"
    elif found.weights is not None:
        where = found.folder / found.weights if found.folder is not None else f"the hub's {found.where}"
        note = f"weights: {where} ({name}.from_pretrained, float32)"
        missing = getattr(model, "hookdump_missing", [])
        if missing:
            shown = ", ".join(missing[:4])
            note += f"; {len(missing)} tensor(s) it lacks are random from --seed {spec.seed}: {shown}"
    else:
        note = (
            f"weights: random init from --seed {spec.seed}: {found.source} has no weight file (pass"
            " --checkpoint PATH, or a folder with model.safetensors)"
        )
    return _prepared(found, model.eval()), [note, *found.notes]


def _from_pretrained(found: HFModel) -> nn.Module:
    tf = transformers_module()
    major = int(tf.__version__.split(".")[0])
    dtype = {"dtype" if major >= 5 else "torch_dtype": torch.float32}
    try:
        model, info = found.klass.from_pretrained(
            found.source,
            config=found.config,
            local_files_only=found.offline,
            output_loading_info=True,
            **dtype,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise _not_found(found, exc) from exc
    missing = sorted(info.get("missing_keys") or [])
    object.__setattr__(model, "hookdump_missing", missing)
    return model  # type: ignore[no-any-return]


def check_weights(found: HFModel, meta: nn.Module | None) -> None:
    """``--checkpoint``: a state dict for the config's model (keys and shapes checked on the meta model)."""
    try:
        check_common(found.spec, meta, found.spec.name)
    except InputError as exc:
        if found.spec.checkpoint is not None and "does not fit" in exc.message:
            exc.hint = (
                f"{exc.hint or ''} --checkpoint takes the state dict as model.state_dict() names it (the"
                " paths list-modules shows); a file save_pretrained wrote (older names, which transformers"
                " renames as it loads) goes in a folder with its config.json: -m hf:FOLDER."
            ).strip()
        raise


def record(found: HFModel) -> dict[str, Any]:
    """What the manifest's ``model`` says of an ``hf:`` model: where, which class, which weights."""
    weights: Any = None
    if found.weights is not None and found.folder is not None:
        path = found.folder / found.weights
        weights = {"file": str(path), "sha256": sha256(path) if path.stat().st_size < 2**31 else None}
    elif found.weights is not None:
        weights = {"hub": found.where}
    return {
        "source": "hf",
        "hf": found.where,
        "folder": str(found.folder) if found.folder is not None else None,
        "class": f"transformers.{found.klass.__name__}",
        "model_type": found.config.model_type,
        "attn_implementation": "sdpa" if getattr(found.klass, "_supports_sdpa", False) else "eager",
        "weights": weights,
    }


def name(found: HFModel) -> ResolvedName:
    return ResolvedName(
        found.spec.name, None, [f"model {found.spec.name} is transformers' {found.klass.__name__}"]
    )
