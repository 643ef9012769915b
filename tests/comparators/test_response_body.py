"""Bounded decoding against real servers on 127.0.0.1: bombs decoded piece by piece, every malformed
answer a ComparatorApiError naming the endpoint."""

from __future__ import annotations

import gzip
import zlib

import pytest

from comlrl_lightning.comparators import ComparatorApiError
from comlrl_lightning.comparators.response_body import PIECE, BodyEncodingError, decoded_pieces
from tests.helpers.api_comparator import ITEMS, PROMPTS, SETTINGS, make
from tests.helpers.fake_providers import FakeProvider, Fault

pytestmark = pytest.mark.usefixtures("api_key")


def zeros_gzip(size: int) -> bytes:
    """``size`` zero bytes, gzip-compressed without ever holding them (about 1 KB per MB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + compressor.flush()


def test_a_bomb_is_decoded_in_bounded_pieces():
    bomb = zeros_gzip(64 << 20)  # 64 MB of zeros in about 64 KB: one network chunk
    assert len(bomb) < 100_000
    pieces = decoded_pieces([bomb], "gzip")
    taken = [next(pieces) for _ in range(8)]
    assert all(len(piece) <= PIECE for piece in taken)  # httpx would have made all 64 MB at once


@pytest.mark.parametrize(
    "encoding, body",
    [
        ("gzip", gzip.compress(b'{"a": 1}')),
        ("deflate", zlib.compress(b'{"a": 1}')),
        ("gzip, gzip", gzip.compress(gzip.compress(b'{"a": 1}'))),
        ("identity", b'{"a": 1}'),
        (None, b'{"a": 1}'),
    ],
    ids=["gzip", "deflate", "gzip-twice", "identity", "none"],  # gzip's bytes hold the time: not an id
)
def test_the_codings_asked_for_decode(encoding, body):
    assert b"".join(decoded_pieces([body[:3], body[3:]], encoding)) == b'{"a": 1}'


def test_other_codings_and_broken_bytes_are_errors():
    with pytest.raises(BodyEncodingError, match="Content-Encoding 'br' was not asked for"):
        list(decoded_pieces([b"x"], "br"))
    with pytest.raises(BodyEncodingError, match="does not decode as gzip"):
        list(decoded_pieces([b"not gzip at all"], "gzip"))


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_bomb_from_a_server_stops_at_the_cap_and_is_not_retried(team):
    with FakeProvider("openai") as provider:
        provider.always = Fault(body=zeros_gzip(256 << 20), headers={"Content-Encoding": "gzip"})
        comparator = make(team, provider, concurrency=1, max_response_bytes=1_000_000)
        with pytest.raises(ComparatorApiError, match="more than max_response_bytes=1000000 bytes"):
            comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert len(provider.requests) == 1
    assert provider.requests[0].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize(
    "fault, words",
    [
        (Fault(body=b"[" * 200_000 + b"]" * 200_000), "returned a too deeply nested JSON response"),
        (Fault(body=b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}"), "returned a too deeply nested JSON"),
        (Fault(payload={"choices": 5}), "'choices' is a int, not the list the openai format requires"),
        (Fault(payload={"choices": "text"}), "'choices' is a str, not the list"),
        (Fault(payload={"choices": [{"message": "not an object"}]}), "no usable completions"),
        (Fault(payload=[1, 2]), "has no 'choices' field"),
        (Fault(body=b"\xff\xfe not utf-8 {"), "returned a non-JSON response"),
        (Fault(body=b"1" * 5000), "returned a non-JSON response"),  # more digits than Python converts
        (Fault(body=b"garbage", headers={"Content-Encoding": "gzip"}), "a body that cannot be read"),
        (Fault(body=b"{}", headers={"Content-Encoding": "br"}), "Content-Encoding 'br' was not asked for"),
    ],
    ids=["200000-deep", "deep-inside", "int", "str", "bad-choice", "list", "not-utf8", "digits", "gzip", "br"],
)
def test_every_malformed_answer_is_a_comparator_error_naming_the_endpoint(team, fault, words):
    with FakeProvider("openai") as provider:
        provider.always = fault
        comparator = make(team, provider, concurrency=1, max_retries=0)
        with pytest.raises(ComparatorApiError) as error:
            comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert words in str(error.value)
    assert provider.url in str(error.value) or "no usable completions" in words


@pytest.mark.parametrize("fmt", ["anthropic", "openai_responses"])
def test_wrong_shapes_of_the_other_formats_are_named(team, fmt):
    field = {"anthropic": "content", "openai_responses": "output"}[fmt]
    with FakeProvider(fmt) as provider:
        provider.always = Fault(payload={field: {"not": "a list"}})
        comparator = make(team, provider, concurrency=1, max_retries=0)
        with pytest.raises(ComparatorApiError, match=rf"at {provider.url}: .*'{field}' is a dict, not the list"):
            comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
