"""Option validation shared by the modules and data modules.

Every rule raises :class:`OptionError` with a message that names the option and the allowed
values. The classes call these helpers first thing in ``__init__``, before any model is loaded, so
a bad config fails while it is being parsed by the CLI.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, Optional

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
