"""The seed's config fields checked against their declared types, before any rule reads them.

``MADPOConfig(num_train_epochs="3")`` would otherwise fail deep inside a comparison with a bare
``TypeError``, and ``num_agents=2.5`` would pass every ``>= 1`` rule. :func:`check_field_types`
runs first in the configs' ``__post_init__`` and raises
:class:`~comlrl_lightning.errors.ConfigurationTypeError` naming the field and the type it needs
(never the value: a field may hold a secret pasted into the wrong place). An ``int`` is accepted
for a ``float`` field, a path or a ``torch.device`` for a string; ``True``/``False`` are never numbers.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import numbers
import os
import typing
from typing import Any, Tuple

import torch

from comlrl_lightning.errors import ConfigurationTypeError


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


__all__ = ["check_field_types"]
