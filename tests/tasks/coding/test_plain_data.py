"""Plain data between the trainer and a program: what crosses, what is refused (no process started)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from comlrl_lightning.tasks.coding.plain_data import (
    HEADER,
    MAX_BRACKETS,
    MAX_DEPTH,
    MAX_HASHED_ELEMENTS,
    MAX_SAME_HASH,
    NotPlainData,
    bracket_depth,
    decode,
    encode,
    frame,
)

MODULUS = sys.hash_info.modulus
"""Ints hash to themselves modulo this (2**61 - 1): every multiple of it hashes to 0."""


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -7,
        10**30,
        1.5,
        float("inf"),
        "é\n",
        "a\ud800b",  # a lone surrogate stays data (a check may compare it), sent as its JSON escape
        {-1, -2, 0, MODULUS},  # a few elements sharing a hash are plain data
        [1, [2.0, "x"]],
        (1, (2,)),
        {1: "a", "b": (None,)},
        {1, 2},
        frozenset({"x"}),
        [],
        (),
        {},
    ],
)
def test_plain_values_round_trip_with_their_types(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)


def test_a_dict_keeps_integer_keys_and_a_tuple_stays_a_tuple():
    assert decode(encode({5: (1, 2)})) == {5: (1, 2)}
    assert type(decode(encode({5: (1, 2)}))[5]) is tuple


class AlwaysEqual:
    def __eq__(self, other):
        return True


class SneakyInt(int):
    def __eq__(self, other):
        return True


@pytest.mark.parametrize("value", [AlwaysEqual(), SneakyInt(3), [SneakyInt(1)], b"bytes", 1j, print, iter([1])])
def test_what_is_not_plain_data_is_refused_however_it_compares(value):
    with pytest.raises(NotPlainData):
        encode(value)


def test_a_self_containing_or_too_deep_value_is_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotPlainData, match="nested deeper"):
        encode(loop)
    deep: list = []
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(NotPlainData):
        encode(deep)


@pytest.mark.parametrize(
    "body",
    [
        b'{"pickle": []}',
        b'{"tuple": 1}',
        b'{"dict": [[1]]}',
        b'{"set": [[1]]}',
        b'{"a": [], "b": []}',
        b"[" * 100_000,
        b"\xff",
        b"1" * 5000,
        b"not json",
    ],
)
def test_a_forged_or_hostile_body_is_refused_not_trusted(body):
    with pytest.raises(NotPlainData):
        decode(body)


def test_a_frame_is_its_length_then_its_body():
    data = frame([1, "a"])
    assert HEADER.unpack(data[:4])[0] == len(data) - 4 and decode(data[4:]) == [1, "a"]


def tagged(tag: str, elements: list) -> bytes:
    return json.dumps({tag: elements}).encode()


COLLIDING = [k * MODULUS for k in range(41_000)]
"""41,000 distinct ints of hash 0: as a set they took 41.6 s to build (n**2 / 2 equality tests)."""


@pytest.mark.parametrize(
    "body",
    [
        tagged("set", COLLIDING),
        tagged("frozenset", COLLIDING),
        tagged("dict", [[k, 0] for k in COLLIDING]),
        tagged("set", [{"tuple": [k]} for k in COLLIDING[:MAX_HASHED_ELEMENTS]]),  # tuples of them hash alike too
        tagged("set", [-1 - k * MODULUS for k in range(MAX_HASHED_ELEMENTS)]),  # all hash to -2, like -1 and -2
    ],
    ids=["set", "frozenset", "dict-keys", "tuples", "minus-one"],
)
def test_elements_that_hash_alike_are_refused_before_any_container_is_built(body):
    started = time.monotonic()
    with pytest.raises(NotPlainData, match="elements"):
        decode(body)
    assert time.monotonic() - started < 10  # a sanity bound: the refusal itself is a few milliseconds


def test_at_most_max_same_hash_elements_of_one_container_may_share_a_hash():
    alike = [k * MODULUS for k in range(MAX_SAME_HASH)]
    assert decode(tagged("set", alike)) == set(alike)
    with pytest.raises(NotPlainData, match=f"{MAX_SAME_HASH + 1} elements of one set share the hash 0"):
        decode(tagged("set", alike + [MAX_SAME_HASH * MODULUS]))
    with pytest.raises(NotPlainData, match="share the hash"):
        encode(set(alike + [MAX_SAME_HASH * MODULUS]))  # refused where it is made too


def test_hashed_elements_of_one_value_are_capped_in_all_its_containers():
    half = MAX_HASHED_ELEMENTS // 2
    allowed = [set(range(half)), {k: 0 for k in range(half, 2 * half)}]
    assert decode(encode(allowed)) == allowed
    over = [set(range(half)), frozenset(range(half, 2 * half + 1))]
    with pytest.raises(NotPlainData, match=f"more than {MAX_HASHED_ELEMENTS}"):
        encode(over)
    body = json.dumps([{"set": list(range(half))}, {"frozenset": list(range(half, 2 * half + 1))}]).encode()
    with pytest.raises(NotPlainData, match=f"more than {MAX_HASHED_ELEMENTS}"):
        decode(body)


def test_json_nesting_is_refused_before_parsing_and_brackets_in_strings_do_not_count():
    deepest: object = 0
    for _ in range(MAX_DEPTH):
        deepest = {0: deepest}  # a dict level is three brackets
    body = encode(deepest)
    assert bracket_depth(body) == MAX_BRACKETS and decode(body) == deepest
    too_deep = b"[" * (MAX_BRACKETS + 1) + b"]" * (MAX_BRACKETS + 1)
    with pytest.raises(NotPlainData, match=f"nested {MAX_BRACKETS + 1} brackets deep"):
        decode(too_deep)
    assert bracket_depth(json.dumps(["[[[{{", '\\"]]', "]"]).encode()) == 1


def test_a_lone_surrogate_crosses_as_an_ascii_escape_so_every_frame_is_utf8():
    body = encode(["\ud800", "é"])
    body.decode("utf-8")
    assert decode(body) == ["\ud800", "é"]


@pytest.mark.parametrize(
    "body",
    [b'"a\\' * 300_000, b'["' + b"[" * 1_000_000, b"[" * 600_000, b'"' * 1_000_000, b'{"a":' * 200_000],
    ids=["escaped-quotes", "unterminated-string", "deep", "quotes", "deep-objects"],
)
def test_a_hostile_body_of_a_mebibyte_is_refused_in_linear_time(body):
    started = time.monotonic()
    with pytest.raises(NotPlainData):
        decode(body)
    assert time.monotonic() - started < 10  # a sanity bound: each takes well under a second


def test_escaped_backslashes_and_quotes_are_paired_as_json_pairs_them():
    assert bracket_depth(b'["\\\\\\"[", [[1]]]') == 3  # the string holds \\, \" and [
    assert bracket_depth(b'["\\\\", [[1]]]') == 3  # the string ends after an escaped backslash
