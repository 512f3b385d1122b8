"""``--import MODULE_OR_FILE``: user code that registers models with timm, and which models it registered."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from pathlib import Path

from ....errors import InputError


def import_plugins(specs: tuple[str, ...]) -> list[str]:
    """Import user modules or ``.py`` files that register models with timm; return their module names.

    timm's warnings about its own deprecated import paths (plugins written for timm 0.x use them) are
    silenced: they are advice to the plugin's author, not to the person running hookdump.
    """
    names = []
    for spec in specs:
        path = Path(spec)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=FutureWarning, module="timm")
                warnings.filterwarnings("ignore", category=DeprecationWarning, module="timm")
                if spec.endswith(".py") or path.is_file():
                    names.append(_import_file(path))
                else:
                    importlib.import_module(spec)
                    names.append(spec)
        except InputError:
            raise
        except BaseException as exc:  # SyntaxError, SystemExit and friends from user code
            raise InputError(
                f"Could not import plugin `{spec}`: {type(exc).__name__}: {exc}",
                "Fix the plugin so that `python -c 'import ...'` works, or drop --import.",
            ) from exc
    return names


def _import_file(path: Path) -> str:
    if path.is_dir():
        raise InputError(f"Plugin `{path}` is a folder.", "Pass a .py file, or the folder's module name.")
    if not path.is_file():
        raise InputError(
            f"Plugin file `{path}` does not exist.", "Pass an existing .py file or a module name."
        )
    module_name = f"hookdump_plugin_{path.stem}"
    if module_name in sys.modules:
        return module_name
    spec = importlib.util.spec_from_file_location(module_name, path.resolve())
    if spec is None or spec.loader is None:
        raise InputError(f"Plugin `{path}` cannot be loaded as Python.", "Pass a .py file or a module name.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module_name


def registered_by(modules: list[str]) -> list[str]:
    """The timm model names whose builders are defined in ``modules`` (or their submodules)."""
    import timm
    from timm.models import model_entrypoint

    def ours(name: str) -> bool:
        where = getattr(model_entrypoint(name), "__module__", "") or ""
        return any(where == m or where.startswith(m + ".") for m in modules)

    return [name for name in timm.list_models() if ours(name)]


def plugin_of(timm_name: str) -> str | None:
    """The module that registered ``timm_name`` when it is not timm's own model, else None."""
    from timm.models import is_model, model_entrypoint

    if not is_model(timm_name):
        return None
    where = str(getattr(model_entrypoint(timm_name), "__module__", "") or "")
    return None if where == "timm" or where.startswith("timm.") else where.removeprefix("hookdump_plugin_")
