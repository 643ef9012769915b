"""Plain data between the trainer and a program under test: values as tagged JSON, never pickle.

Plain data is ``None``, ``bool``, ``int``, ``float``, ``str`` and lists, tuples, dicts, sets and
frozensets of plain data, of these exact types (a subclass of ``int`` with its own ``__eq__`` is not
plain). JSON carries ``None``/booleans/numbers/strings/lists itself; the other containers are a
one-key object: ``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}``, ``{"set": [...]}``,
``{"frozenset": [...]}`` (so a dict keeps its integer keys and a tuple stays a tuple). A frame is
a 4-byte big-endian length and that many bytes of UTF-8 JSON.

Limits, on both sides:

* nesting: :func:`encode` refuses a value more than :data:`MAX_DEPTH` containers deep; :func:`decode`
  refuses a body before it is parsed when its JSON brackets nest deeper than :data:`MAX_BRACKETS`
  (what the deepest encodable value takes: a dict level is three brackets), so the parser never
  recurses further;
* hashed containers (sets, frozensets, dict keys): at most :data:`MAX_HASHED_ELEMENTS` elements in
  one value, and at most :data:`MAX_SAME_HASH` elements of one container sharing a hash value. Ints
  hash to themselves modulo ``sys.hash_info.modulus`` (``2**61 - 1``), so a program can make
  thousands of distinct numbers (multiples of the modulus, ``-1 - k * modulus``, tuples of them)
  hash alike, and building a set of ``n`` of them costs ``n**2 / 2`` equality tests: 41,000 of
  them took 41.6 s, holding the GIL. Each hash is computed and counted before the container is
  built.

The bound: decoding a body of ``B`` bytes (at most ``RunLimits.message_bytes``; every element takes
at least two bytes, so it holds under ``B / 2`` elements) takes linear work for the bracket scan and
the JSON parse (an integer has at most Python's 4,300 digits), then builds hashed containers of
``N`` elements in all (``N <= MAX_HASHED_ELEMENTS``): each element is hashed twice (its size in
work) and compared with at most ``MAX_SAME_HASH - 1`` elements of the same hash (each comparison
at most its size).
Whatever the hashes, CPython's open addressing inserts an element in at most ``8 * N + 13`` probe
steps (a container's table has at most ``8 * N`` slots, and once the hash's bits are used up its
probe sequence ``i -> 5 * i + 1`` visits every slot), so with the resizes under ``20 * N**2``
steps in all (each reads a few adjacent slots): 3.4 * 10**8 for ``N = 4096``, about a second at the
very worst. The collisions we could build with distinct hashes (4,096 integers whose hashes share
their low 13 to 47 bits, as a set or as dict keys) decode in under 40 ms; equal hashes are refused.

Strings stay what they were (a lone surrogate such as ``"\\ud800"`` too: a check may compare it);
text made from them for a report, a file or a prompt is made valid where it is made (see
:mod:`comlrl_lightning.runtime.text`). A lone surrogate is sent as its JSON escape, so a frame is
always valid UTF-8.

This module uses the standard library only: its source is also the first part of the launcher the
program's interpreter runs (see :mod:`comlrl_lightning.tasks.coding.launcher`).
"""

import array
import collections
import itertools
import json
import struct

MAX_DEPTH = 64
"""The deepest nesting of containers that counts as plain data."""

MAX_BRACKETS = 3 * MAX_DEPTH
"""The deepest nesting of JSON brackets a body may have (a dict level is ``{"dict": [[k, v]]}``)."""

MAX_HASHED_ELEMENTS = 1 << 12
"""Elements of the sets and frozensets and keys of the dicts of one value, all together."""

MAX_SAME_HASH = 8
"""Elements of one set, frozenset or dict's keys that may share one hash value."""

HEADER = struct.Struct(">I")
"""A frame's header: the length of its JSON body in bytes."""

_SCALARS = (type(None), bool, int, float, str)
_TAGS = {"tuple": tuple, "set": set, "frozenset": frozenset}
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class NotPlainData(ValueError):
    """A value (or a message) that is not plain data."""


def check_hashes(elements, kind, budget):
    """Refuse ``elements`` (of a ``kind`` to be built) when ``budget`` (a one-item list: the hashed
    elements left for this value) runs out or more than :data:`MAX_SAME_HASH` of them share a hash;
    computing and counting the hashes is linear, and happens before any container is built."""
    budget[0] -= len(elements)
    if budget[0] < 0:
        raise NotPlainData(f"more than {MAX_HASHED_ELEMENTS} set, frozenset and dict-key elements in one value")
    try:
        hashes = [hash(element) for element in elements]
    except TypeError as error:  # an unhashable key or set element
        raise NotPlainData(f"an unhashable {kind} element: {error}") from None
    if len(hashes) > MAX_SAME_HASH:
        value, count = collections.Counter(hashes).most_common(1)[0]
        if count > MAX_SAME_HASH:
            raise NotPlainData(f"{count} elements of one {kind} share the hash {value} (at most {MAX_SAME_HASH})")


def _ready(value, depth, budget):
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth >= MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    if kind is list:
        return [_ready(element, depth + 1, budget) for element in value]
    if kind is dict:
        check_hashes(list(value), "dict", budget)
        return {"dict": [[_ready(k, depth + 1, budget), _ready(v, depth + 1, budget)] for k, v in value.items()]}
    if kind in (tuple, set, frozenset):
        if kind is not tuple:
            check_hashes(list(value), kind.__name__, budget)
        elements = value if kind is tuple else sorted(value, key=repr)
        return {kind.__name__: [_ready(element, depth + 1, budget) for element in elements]}
    raise NotPlainData(f"a {kind.__name__} is not plain data")


def to_json_ready(value):
    """``value`` as JSON-ready lists and one-key tag objects; :class:`NotPlainData` if it is not plain
    (or past a limit: see the module's docstring)."""
    return _ready(value, 0, [MAX_HASHED_ELEMENTS])


def bracket_depth(body):
    """How deep the JSON brackets of ``body`` nest outside its strings, in linear time (byte
    replacements, a split and a running sum, all in C; no regular expression to backtrack).

    Escaped backslashes, then escaped quotes, are removed (pairing backslashes from the left as JSON
    does), so every quote left opens or closes a string: the pieces between them alternate outside
    and inside. What follows an unterminated string is never parsed, so it is not counted."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.split(b'"')[::2])
    steps = outside.translate(None, _NOT_BRACKETS).translate(_BRACKET_STEPS)
    return max(itertools.accumulate(array.array("b", steps)), default=0)


def _builder(budget):
    """The ``object_pairs_hook`` of one :func:`decode`: one known tag, its list, the container built
    once its elements passed :func:`check_hashes`."""

    def from_pairs(pairs):
        if len(pairs) != 1 or type(pairs[0][1]) is not list:
            raise NotPlainData("a JSON object that is not one tag with a list")
        tag, elements = pairs[0]
        if tag == "dict":
            if any(type(pair) is not list or len(pair) != 2 for pair in elements):
                raise NotPlainData("a dict entry that is not a [key, value] pair")
            check_hashes([key for key, _ in elements], tag, budget)
            return {key: value for key, value in elements}
        if tag in _TAGS:
            if tag != "tuple":
                check_hashes(elements, tag, budget)
            return _TAGS[tag](elements)
        raise NotPlainData(f"an unknown tag {tag[:40]!r}")

    return from_pairs


def encode(value):
    """``value`` (plain data) as the UTF-8 bytes of its tagged JSON (lone surrogates as escapes)."""
    ready = to_json_ready(value)
    text = json.dumps(ready, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON's \\ud800 escape carries it
        return json.dumps(ready, separators=(",", ":")).encode("ascii")


def decode(body):
    """The plain data a frame body holds; :class:`NotPlainData` for anything else (malformed, too deep,
    an unknown tag, past a limit of the module's docstring, an integer past Python's digit limit)."""
    opening = body.count(b"[") + body.count(b"{")
    depth = bracket_depth(body) if opening > MAX_BRACKETS else opening  # fewer cannot nest deeper
    if depth > MAX_BRACKETS:
        raise NotPlainData(f"JSON nested {depth} brackets deep (at most {MAX_BRACKETS})")
    try:
        value = json.loads(body.decode("utf-8"), object_pairs_hook=_builder([MAX_HASHED_ELEMENTS]))
    except NotPlainData:
        raise
    except (ValueError, RecursionError, TypeError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise NotPlainData(f"not plain data: {type(error).__name__}: {str(error)[:120]}") from None
    return value


def frame(value):
    """``value`` as one frame: its length and its encoding."""
    body = encode(value)
    return HEADER.pack(len(body)) + body
