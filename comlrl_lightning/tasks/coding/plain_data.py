"""Plain data between the trainer and a program under test: values as tagged JSON, never pickle.

Plain data is ``None``, ``bool``, ``int``, ``float``, ``str`` and lists, tuples, dicts, sets and
frozensets of plain data, of these exact types (a subclass of ``int`` with its own ``__eq__`` is not
plain). JSON carries ``None``/booleans/numbers/strings/lists itself; the other containers are a
one-key object: ``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}``, ``{"set": [...]}``,
``{"frozenset": [...]}`` (so a dict keeps its integer keys and a tuple stays a tuple). A frame is
a 4-byte big-endian length and that many bytes of UTF-8 JSON.

This module uses the standard library only: its source is also the first part of the launcher the
program's interpreter runs (see :mod:`comlrl_lightning.tasks.coding.launcher`).
"""

import json
import struct

MAX_DEPTH = 64
"""The deepest nesting of containers that counts as plain data."""

HEADER = struct.Struct(">I")
"""A frame's header: the length of its JSON body in bytes."""

_SCALARS = (type(None), bool, int, float, str)
_TAGS = {"tuple": tuple, "set": set, "frozenset": frozenset}


class NotPlainData(ValueError):
    """A value (or a message) that is not plain data."""


def to_json_ready(value, depth=0):
    """``value`` as JSON-ready lists and one-key tag objects; :class:`NotPlainData` if it is not plain."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth >= MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    if kind is list:
        return [to_json_ready(element, depth + 1) for element in value]
    if kind is dict:
        return {"dict": [[to_json_ready(k, depth + 1), to_json_ready(v, depth + 1)] for k, v in value.items()]}
    if kind in (tuple, set, frozenset):
        elements = value if kind is tuple else sorted(value, key=repr)
        return {kind.__name__: [to_json_ready(element, depth + 1) for element in elements]}
    raise NotPlainData(f"a {kind.__name__} is not plain data")


def _from_pairs(pairs):
    """The ``object_pairs_hook`` of :func:`decode`: one known tag, its list, the container built."""
    if len(pairs) != 1 or type(pairs[0][1]) is not list:
        raise NotPlainData("a JSON object that is not one tag with a list")
    tag, elements = pairs[0]
    try:
        if tag == "dict":
            if any(type(pair) is not list or len(pair) != 2 for pair in elements):
                raise NotPlainData("a dict entry that is not a [key, value] pair")
            return {key: value for key, value in elements}
        if tag in _TAGS:
            return _TAGS[tag](elements)
    except TypeError as error:  # an unhashable key or set element
        raise NotPlainData(f"an unhashable {tag} element: {error}") from None
    raise NotPlainData(f"an unknown tag {tag[:40]!r}")


def encode(value):
    """``value`` (plain data) as the UTF-8 bytes of its tagged JSON."""
    return json.dumps(to_json_ready(value), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode(body):
    """The plain data a frame body holds; :class:`NotPlainData` for anything else (malformed, too deep,
    an unknown tag, an integer past Python's digit limit)."""
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_from_pairs)
    except NotPlainData:
        raise
    except (ValueError, RecursionError, TypeError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise NotPlainData(f"not plain data: {type(error).__name__}: {str(error)[:120]}") from None


def frame(value):
    """``value`` as one frame: its length and its encoding."""
    body = encode(value)
    return HEADER.pack(len(body)) + body
