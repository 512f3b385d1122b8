"""timm's model names: a registered name, one of the Twins repository's (aliases of timm's Twins), or a
plugin's (``--import``), with the fix when none fits."""

from __future__ import annotations

from ....errors import InputError, did_you_mean
from ....units import first_few
from ...spec import DEFAULT_MODEL, ModelSpec, ResolvedName
from .plugins import import_plugins, registered_by

#: The original Twins repository registered these names; timm ships the same architectures.
ALIASES = {
    "alt_gvt_small": "twins_svt_small",
    "alt_gvt_base": "twins_svt_base",
    "alt_gvt_large": "twins_svt_large",
    "pcpvt_small": "twins_pcpvt_small",
    "pcpvt_base": "twins_pcpvt_base",
    "pcpvt_large": "twins_pcpvt_large",
}


def resolve_name(spec: ModelSpec) -> ResolvedName:
    """Import plugins, then map the requested name onto a registered timm model."""
    import timm

    name = spec.name
    try:
        modules = import_plugins(spec.imports)
    except InputError as exc:
        if name in ALIASES:
            exc.hint = f"{exc.hint} {no_plugin_needed(name)}"
        raise
    notes = [] if spec.name_given else [f"no model given: using the default, {DEFAULT_MODEL}"]
    if name.startswith(("hf-hub:", "hf_hub:", "local-dir:")) or timm.is_model(name):
        return ResolvedName(name, name, notes)
    if name in ALIASES:
        timm_name = ALIASES[name]
        notes.append(f"model {name} is the Twins repository's name for timm's {timm_name}")
        return ResolvedName(name, timm_name, notes)
    theirs = registered_by(modules) if modules else []
    if modules and not theirs:
        plugins = ", ".join(f"`{p}`" for p in spec.imports)
        raise InputError(
            f"Unknown model `{name}`: the plugin {plugins} registered no model with timm.",
            "Decorate the plugin's model function with @register_model (from timm.models import"
            " register_model), then pass the function's name with -m.",
        )
    close = did_you_mean(name, sorted(set(timm.list_models()) | set(ALIASES)))
    if theirs:
        shown = first_few(theirs, 8)
        raise InputError(
            f"Unknown model `{name}`: neither timm nor the plugin has a model of that name.",
            f"{close} The plugin registered {shown}.".strip(),
        )
    hint = (
        "`python -c 'import timm; print(timm.list_models(\"*name*\"))'` lists timm's models;"
        " --import MODULE_OR_FILE adds your own."
    )
    raise InputError(f"Unknown model `{name}`: timm has no model of that name.", f"{close} {hint}".strip())


def no_plugin_needed(name: str) -> str:
    return (
        f"hookdump's built-in alias `{name}` builds timm's {ALIASES[name]}, the same architecture, with no"
        " plugin: run it without --import."
    )
