"""Plain data between the trainer and a program: what crosses, what is refused (no process started)."""

from __future__ import annotations

import pytest

from comlrl_lightning.tasks.coding.plain_data import HEADER, MAX_DEPTH, NotPlainData, decode, encode, frame


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
