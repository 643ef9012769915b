"""``null`` given on the command line for an option nested in a part's options means ``None``.

jsonargparse passes a command-line value for an option two levels inside a ``class_path`` part
(``--data.task.eval_dataset=null``, ``--model.sampling.top_k=null``) on to the part's own parser as
the text of its Python value, so ``null`` arrives as the string ``"None"``: a dataset named "None"
looked up on the hub, or, for a number, a parse error. :func:`parse_with_nulls` sets such options
aside (:func:`set_aside_nulls`), parses the rest, and puts ``None`` in the parsed config where the
command line said ``null`` (:func:`restore_nulls`), refusing ``null`` by name for an option that cannot
be ``None``. An option set aside that the parsed config does not hold is parsed again as given, so
jsonargparse reports it as it would. A config file's ``null`` and a literal ``--option=None`` (the
text) are left as they are.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import typing
from typing import Any, Dict, List, Optional, Sequence, Tuple

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


def set_aside_nulls(args: Sequence[str], only: Optional[Sequence[str]] = None) -> Tuple[List[str], List[str]]:
    """``args`` without the options jsonargparse would pass on as the text ``"None"`` (given ``null``
    last, two or more levels below the command's sections, ``init_args`` not counted; of ``only``,
    if given), and those options' dotted keys."""
    last: Dict[str, bool] = {}  # option -> whether its last value is null (a later value wins)
    for index, word in enumerate(args):
        if isinstance(word, str) and word.startswith("--"):
            key, equals, value = word[2:].partition("=")
            if not equals:
                following = args[index + 1] if index + 1 < len(args) else None
                value = following if isinstance(following, str) else ""
            last[key] = value in NULL_WORDS
    aside = [key for key, null in last.items() if null and _without_init_args(key).count(".") >= 2]
    aside = [key for key in aside if only is None or key in only]
    kept: List[str] = []
    skip_value = False
    for word in args:
        if skip_value:
            skip_value = False
            continue
        key, equals, _ = word[2:].partition("=") if isinstance(word, str) and word.startswith("--") else ("", "", "")
        if key in aside:
            skip_value = not equals
            continue
        kept.append(word)
    return kept, aside


def _without_init_args(key: str) -> str:
    return ".".join(part for part in key.split(".") if part != "init_args")


def restore_nulls(config: Any, keys: Sequence[str]) -> List[str]:
    """Set each option of ``keys`` (dotted, as :func:`set_aside_nulls` returns them) to ``None`` in
    ``config`` (a parsed jsonargparse namespace); returns the keys ``config`` does not hold inside a
    part. An option that cannot be ``None`` is a :class:`ConfigurationError` naming it."""
    subcommand = config.get("subcommand") if hasattr(config, "get") else None
    root = config[subcommand] if subcommand else config
    missing = []
    for key in keys:
        found = _resolved(root, key)
        if found is None or found[1] is None:
            missing.append(key)
            continue
        path, owner, below = found
        if not _takes_none(_hint(owner, below)):
            raise ConfigurationError(f"{key} cannot be null: give it a value, or leave it out for its default.")
        root[".".join(path)] = None
    return missing


def parse_with_nulls(parser: Any, args: Any) -> Any:
    """``parser.parse_args(args)`` (``None``: the process's arguments; a dict or namespace is parsed
    as an object) with ``null`` meaning ``None`` for nested options (see the module's docstring)."""
    if args is not None and not isinstance(args, (list, tuple)):
        return parser.parse_object(args)
    words = list(sys.argv[1:] if args is None else args)
    kept, aside = set_aside_nulls(words)
    if not aside:
        return parser.parse_args(args)
    config = parser.parse_args(kept)
    missing = restore_nulls(config, aside)
    if missing:  # not an option inside a part: given back to jsonargparse for its own answer
        kept, aside = set_aside_nulls(words, only=[key for key in aside if key not in missing])
        config = parser.parse_args(kept)
        restore_nulls(config, aside)
    return config


__all__ = ["NULL_WORDS", "null_options", "parse_with_nulls", "restore_nulls", "set_aside_nulls"]
