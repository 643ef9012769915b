"""Objects named by import path (``my_rewards.joint_reward``), found where ``python -m`` finds them.

A reward function, a formatter, a transition or an adapter may be given as ``"package.module.name"``.
The ``comlrl-lightning`` console script starts with its own folder first on ``sys.path``, not the
working directory, so a ``my_rewards.py`` beside the user's config would not be found: the command
line puts the working directory first (:func:`working_directory_first`), as ``python -m`` does, and
:func:`import_object` tries the working directory itself when a caller's ``sys.path`` lacks it (the
seed's Python API from a notebook or a script elsewhere). A module that is still not found is one
line naming the option, the path and where it was looked for.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any, List, Optional, Type

from comlrl_lightning.errors import ConfigurationError


def working_directory_first(path: List[str], cwd: Optional[str] = None) -> None:
    """Put the working directory (``cwd``, default ``os.getcwd()``) first on ``path`` (``sys.path``)
    unless it is there already: what ``python -m`` does, so a module beside the config imports."""
    folder = cwd if cwd is not None else os.getcwd()
    if not _on_path(path, folder):
        path.insert(0, folder)


def import_object(spec: str, option: str, error_type: Type[ConfigurationError] = ConfigurationError) -> Any:
    """The object ``spec`` (``"package.module.name"``) names; ``option`` is the option that gave it.

    The module is imported from ``sys.path``, then from the working directory if ``sys.path`` does
    not hold it; the working directory leaves ``sys.path`` again afterwards (the module stays imported).
    Errors (an ``error_type``) start with ``"<option>: cannot import '<spec>'"``.
    """
    try:
        module_name, _, attribute = spec.strip().rpartition(".")
        if not module_name or not attribute:
            raise ConfigurationError(f"{option}: cannot import {spec!r} (an import path is package.module.name).")
        module = import_module(module_name, spec, option)
        if not hasattr(module, attribute):
            where = getattr(module, "__file__", None) or module_name
            raise ConfigurationError(f"{option}: cannot import {spec!r} ({where} has no {attribute!r}).")
    except ConfigurationError as error:
        raise error if isinstance(error, error_type) else error_type(str(error)) from None
    return getattr(module, attribute)


def import_module(module_name: str, spec: str, option: str) -> ModuleType:
    """Module ``module_name`` (of ``spec``), from ``sys.path`` or else the working directory."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if not _names_the_path(error, module_name):
            raise _import_failed(spec, option, error) from error
        missing = error.name or module_name
    except (ImportError, ValueError) as error:
        raise _import_failed(spec, option, error) from error
    cwd = os.getcwd()
    if not _on_path(sys.path, cwd):
        sys.path.insert(0, cwd)
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if not _names_the_path(error, module_name):
                raise _import_failed(spec, option, error) from error
            missing = error.name or module_name
        except (ImportError, ValueError) as error:
            raise _import_failed(spec, option, error) from error
        finally:
            sys.path.remove(cwd)
    raise ConfigurationError(not_found_message(spec, option, missing, cwd))


def not_found_message(spec: str, option: str, missing: str, cwd: str) -> str:
    """The one line for a module of ``spec`` that is nowhere: the option, the path, where it looked."""
    top = missing.split(".")[0]
    return (
        f"{option}: cannot import {spec!r}: no module named {missing!r} in the working directory ({cwd}) or on "
        f"sys.path. Put {top}.py (or a {top}/ package) in the folder you run from, or install the package that holds it."
    )


def _names_the_path(error: ModuleNotFoundError, module_name: str) -> bool:
    """Whether the module not found is ``module_name`` or one of its parents (not a module it imports)."""
    parts = module_name.split(".")
    return error.name is None or error.name in {".".join(parts[:end]) for end in range(1, len(parts) + 1)}


def _import_failed(spec: str, option: str, error: BaseException) -> ConfigurationError:
    return ConfigurationError(f"{option}: cannot import {spec!r} ({type(error).__name__}: {error}).")


def _on_path(path: List[str], folder: str) -> bool:
    """Whether ``folder`` is on ``path`` (``""`` is the working directory, as Python reads it)."""
    real = os.path.realpath(folder)
    return any(os.path.realpath(entry or os.getcwd()) == real for entry in path if isinstance(entry, str))


__all__ = ["import_object", "working_directory_first"]
