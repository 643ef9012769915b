"""Hyperparameters as plain values: what a config file says, never an object.

A module made from Python gets its options as objects (a ``TeamOptions``, a ``peft.LoraConfig``...);
Lightning would store those objects in ``hparams``, so ``hparams.yaml`` would hold Python tags and a
checkpoint would no longer load with ``torch.load(weights_only=True)``. :class:`PlainHyperparameters`
stores them the way the command line does: a nested option as a mapping, a class chosen by
``class_path`` as ``class_path`` plus ``init_args``; objects that no config can say (models,
tokenizers) are left out.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import json
from typing import Any, Mapping

from lightning.pytorch.core.mixins import HyperparametersMixin

from comlrl_lightning.runtime.compat import initial_hyperparameters

OBJECT = object()
"""What :func:`plain` returns for a value no config file can hold."""


def is_nested_options(value: Any) -> bool:
    """A dataclass all of whose bases are dataclasses: a config gives it as a mapping (jsonargparse's
    nested options); any other class is chosen by ``class_path``."""
    bases = [base for base in type(value).__mro__ if base is not object]
    return dataclasses.is_dataclass(value) and all(dataclasses.is_dataclass(base) for base in bases)


def plain(value: Any) -> Any:
    """``value`` as a config file would say it, or :data:`OBJECT`. Enums become their values, sets
    sorted lists, mappings and dataclass fields lose their entries that are objects."""
    if isinstance(value, enum.Enum):  # first: a str or int enum is not a plain str or int
        return plain(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=str)
    if isinstance(value, (list, tuple)):
        items = [plain(item) for item in value]
        return OBJECT if any(item is OBJECT for item in items) else items
    if isinstance(value, Mapping):
        return {str(key): item for key, item in ((k, plain(v)) for k, v in value.items()) if item is not OBJECT}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = plain({field.name: getattr(value, field.name) for field in dataclasses.fields(value) if field.init})
        if is_nested_options(value):
            return fields
        return {"class_path": f"{type(value).__module__}.{type(value).__qualname__}", "init_args": fields}
    return OBJECT


def builtin_values(value: Any) -> Any:
    """``value`` of builtin types only (an ``int`` subclass such as jsonargparse's ``PositiveInt``
    becomes an ``int``), or :data:`OBJECT` when any part is something else."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        items = [builtin_values(item) for item in value]
        return OBJECT if any(item is OBJECT for item in items) else items
    if isinstance(value, Mapping):
        entries = {str(key): builtin_values(item) for key, item in value.items()}
        return OBJECT if any(item is OBJECT for item in entries.values()) else entries
    return OBJECT


def summarized(value: Any, limit: int = 16) -> Any:
    """A plain ``value`` with every list longer than ``limit`` replaced by a short text that names its
    length and digest (``"<1000 items, sha256 3f2a...>"``): a dataset given as a list is compared and
    shown by that, not stored whole in every checkpoint."""
    if isinstance(value, list) and len(value) > limit:
        digest = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
        return f"<{len(value)} items, sha256 {digest[:12]}>"
    if isinstance(value, list):
        return [summarized(item, limit) for item in value]
    if isinstance(value, dict):
        return {key: summarized(item, limit) for key, item in value.items()}
    return value


def set_hyperparameter(owner: HyperparametersMixin, name: str, value: Any) -> None:
    """Set ``owner.hparams[name]`` to ``value`` as a plain value, in the hyperparameters the loggers
    write (``hparams.yaml``) too: for an option changed after construction (the seed API's
    ``train(**generation_kwargs)``)."""
    rendered = plain(value)
    if rendered is OBJECT:
        return
    owner.hparams[name] = rendered
    initial_hyperparameters(owner)[name] = rendered


class PlainHyperparameters(HyperparametersMixin):
    """``save_hyperparameters`` that stores every option as a plain value (see :func:`plain`)."""

    def save_hyperparameters(self, *args: Any, ignore: Any = None, frame: Any = None, logger: bool = True) -> None:
        # the caller's frame, as Lightning's own would take it: it reads the caller's __init__ arguments
        current = inspect.currentframe()
        frame = frame if frame is not None or current is None else current.f_back
        super().save_hyperparameters(*args, ignore=ignore, frame=frame, logger=logger)
        for key, value in list(self.hparams.items()):
            rendered = plain(value)
            if rendered is OBJECT:
                del self.hparams[key]
            else:
                self.hparams[key] = rendered


__all__ = [
    "OBJECT",
    "PlainHyperparameters",
    "builtin_values",
    "is_nested_options",
    "plain",
    "set_hyperparameter",
    "summarized",
]
