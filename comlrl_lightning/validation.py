"""Option validation shared by the modules and data modules.

Every rule raises :class:`OptionError` with a message that names the option and the allowed
values. The classes call these helpers first thing in ``__init__``, before any model is loaded, so
a bad config fails while it is being parsed by the CLI. :func:`check_field_types` checks every
field of a dataclass against its declared type first (the seed's configs), so that
``num_train_epochs="3"`` does not fail deep inside a comparison and ``num_agents=2.5`` does not
pass a ``>= 1`` rule: an ``int`` is accepted for a ``float``, a path or a ``torch.device`` for a
string; ``True``/``False`` are never numbers; the message never shows the value (a field may hold a
secret pasted into the wrong place).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import numbers
import os
import typing
from typing import Any, Iterable, Optional, Tuple

import torch

from comlrl_lightning.errors import ConfigurationError, ConfigurationTypeError


class OptionError(ConfigurationError):
    """A configuration option has a value that is not allowed (a ``ValueError``, and a
    :class:`~comlrl_lightning.errors.ComlrlError`)."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`OptionError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise OptionError(message)


def number(name: str, value: Any) -> None:
    """``value`` is a number (``True``/``False`` are not): a
    :class:`~comlrl_lightning.errors.ConfigurationTypeError` naming ``name`` otherwise (never the value)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigurationTypeError(f"{name} must be a number (got {type(value).__name__}).")


def at_least(name: str, value: Optional[float], minimum: float, allow_none: bool = False) -> None:
    """``value >= minimum`` (``None`` only when ``allow_none``); a value that is not a number is a type error."""
    if value is None:
        require(allow_none, f"{name} must be >= {minimum}.")
        return
    number(name, value)
    suffix = " or null" if allow_none else ""
    require(value >= minimum, f"{name} must be >= {minimum}{suffix}.")


def positive(name: str, value: Optional[float], allow_none: bool = False) -> None:
    """``value > 0`` and finite (``None`` only when ``allow_none``); a value that is not a number is a type error."""
    if value is None:
        require(allow_none, f"{name} must be > 0.")
        return
    number(name, value)
    suffix = " or null" if allow_none else ""
    require(math.isfinite(value) and value > 0, f"{name} must be > 0{suffix}.")


def choice(name: str, value: Optional[str], allowed: Iterable[str]) -> str:
    """Normalise ``value`` (strip, lower-case) and check it is in ``allowed`` (one name per thing, no aliases)."""
    allowed = list(allowed)
    normalised = str(value).strip().lower() if value is not None else ""
    require(normalised in allowed, f"{name} must be one of: {', '.join(allowed)}.")
    return normalised


def check_field_types(config: Any) -> None:
    """Every field of the dataclass ``config`` holds a value of its declared type."""
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        ok, expected = _matches(value, hints.get(field.name, Any))
        if not ok:
            raise ConfigurationTypeError(f"{field.name} must be {expected} (got {type(value).__name__}).")


def _matches(value: Any, hint: Any) -> Tuple[bool, str]:
    """Whether ``value`` is of type ``hint``, and how to say that type in a message."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True, "any value"
    if origin is typing.Union:
        results = [_matches(value, argument) for argument in arguments]
        return any(ok for ok, _ in results), " or ".join(said for _, said in results)
    if hint is type(None):
        return value is None, "null"
    if hint is bool:
        return isinstance(value, bool), "true or false"
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool), "an integer"
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool), "a number"
    if hint is str:  # paths and devices are given as objects too (a Path, a torch.device)
        return isinstance(value, (str, os.PathLike, torch.device)), "a string"
    if origin in (list, tuple, collections.abc.Sequence):
        inner = arguments[0] if arguments else Any
        ok = isinstance(value, (list, tuple)) and all(_matches(item, inner)[0] for item in value)
        return ok, f"a list of {_matches(None, inner)[1].removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        inner = arguments[1] if len(arguments) == 2 else Any
        ok = isinstance(value, dict) and all(_matches(item, inner)[0] for item in value.values())
        return ok, "a mapping"
    return True, str(hint)
