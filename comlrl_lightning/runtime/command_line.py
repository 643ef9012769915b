"""``null`` given on the command line for an option nested in a part's options means ``None``.

jsonargparse passes a command-line value for an option two levels inside a ``class_path`` part
(``--data.task.eval_dataset=null``, ``--model.team.dtype=null``) on as the text of its Python value,
so ``null`` arrives as the string ``"None"`` (a dataset named "None" looked up on the hub, a dtype
named "None"). :func:`restore_nulls` puts ``None`` back where the command line said ``null`` and the
parsed config holds that text, and refuses ``null`` by name for an option that cannot be ``None``.
A config file's ``null`` and a literal ``--option=None`` (the text) are left as they are.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from typing import Any, List, Optional, Sequence, Tuple

from comlrl_lightning.errors import ConfigurationError

NULL_WORDS = frozenset({"null", "Null", "NULL", "~"})
"""What YAML (and so the command line) reads as ``None``."""
UNKNOWN = object()
"""An option whose type could not be found (``None`` is then restored without a check)."""


def null_options(args: Sequence[str]) -> List[str]:
    """The dotted options (no leading ``--``) that ``args`` give as ``null`` (``--key=null`` or ``--key null``)."""
    keys = []
    for index, word in enumerate(args):
        if not isinstance(word, str) or not word.startswith("--"):
            continue
        key, equals, value = word[2:].partition("=")
        if not equals:
            following = args[index + 1] if index + 1 < len(args) else None
            value = following if isinstance(following, str) else ""
        if value in NULL_WORDS:
            keys.append(key)
    return keys


def _resolved(config: Any, key: str) -> Optional[Tuple[List[str], Optional[str], List[str]]]:
    """``key`` as a path in ``config`` (``init_args`` inserted under each ``class_path`` part), the
    class path of the innermost part on it, and the key's parts below that part; ``None`` if absent."""
    node, owner = config, None
    path: List[str] = []
    below: List[str] = []
    for part in key.split("."):
        part_of_a_class = hasattr(node, "get") and "init_args" in node and "class_path" in node
        if part_of_a_class:
            owner, below = node.get("class_path"), []
            if part == "init_args":
                node, path = node["init_args"], path + ["init_args"]
                continue
            node, path = node["init_args"], path + ["init_args"]
        if not hasattr(node, "get") or part not in node:
            return None
        node, path, below = node[part], path + [part], below + [part]
    return path, owner, below


def _hint(class_path: Optional[str], names: List[str]) -> Any:
    """The type hint of option ``names`` (a parameter, then fields of nested dataclasses) of the class."""
    try:
        module, _, name = str(class_path).rpartition(".")
        owner: Any = getattr(importlib.import_module(module), name)
        # the class that declares the option (a subclass may pass it on in **kwargs)
        declaring = [c for c in owner.__mro__ if names[0] in inspect.signature(c.__init__).parameters]
        hints = typing.get_type_hints(declaring[0].__init__) if declaring else {}
        for index, option in enumerate(names):
            hint = hints[option]
            if index == len(names) - 1:
                return hint
            inner = [a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)] or [hint]
            hints = typing.get_type_hints(inner[0]) if inspect.isclass(inner[0]) else {}
    except (ImportError, AttributeError, KeyError, NameError, TypeError, ValueError):
        return UNKNOWN
    return UNKNOWN


def _takes_none(hint: Any) -> bool:
    return hint is UNKNOWN or hint is Any or hint is type(None) or type(None) in typing.get_args(hint)


def restore_nulls(config: Any, args: Any) -> None:
    """Every option ``args`` (a command line; anything else is left alone) give as ``null`` and
    ``config`` (a parsed jsonargparse namespace) holds as the text ``"None"`` becomes ``None``; an
    option that cannot be ``None`` is a :class:`ConfigurationError` naming it."""
    if not isinstance(args, (list, tuple)):
        return
    subcommand = config.get("subcommand") if hasattr(config, "get") else None
    for key in null_options(args):
        found = _resolved(config[subcommand] if subcommand else config, key)
        if found is None or found[1] is None or len(found[2]) < 2:
            continue  # not inside a part's nested option: jsonargparse reads null there itself
        path, owner, below = found
        root = config[subcommand] if subcommand else config
        if root[".".join(path)] != "None":
            continue
        if not _takes_none(_hint(owner, below)):
            raise ConfigurationError(f"{key} cannot be null: give it a value, or leave it out for its default.")
        root[".".join(path)] = None


__all__ = ["NULL_WORDS", "null_options", "restore_nulls"]
