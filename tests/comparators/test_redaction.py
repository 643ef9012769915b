"""Keys redacted by value: a part of a key, and every encoding a library may print it in."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from comlrl_lightning.comparators.redaction import MIN_RUN, contains_secret, redact, remember

KEY = "sk-fake-7Qm2Vx9Lp4Rt8Wz1Nc5Hb3Y"  # 31 characters, as in the sweep


@pytest.fixture(autouse=True, scope="module")
def remembered():
    remember(KEY)


def runs_of_key(text, length=MIN_RUN):
    """Every ``length``-character run of the key that ``text`` still shows."""
    text = text.replace("[redacted]", " ")
    return [KEY[i : i + length] for i in range(len(KEY) - length + 1) if KEY[i : i + length] in text]


@pytest.mark.parametrize(
    "echo",
    [
        KEY,
        KEY[:-4],  # the key minus its last 4 characters (27 of 31 were printed before)
        KEY[5:],  # minus its first 5
        KEY[8:20],  # a piece from the middle
        f"Incorrect API key provided: {KEY[:3]}****{KEY[-12:]}",  # a provider's masked echo keeping a long tail
    ],
    ids=["whole", "minus-last-4", "minus-first-5", "middle", "masked-long-tail"],
)
def test_a_part_of_the_key_is_redacted(echo):
    message = redact(f"error: invalid key {echo} for this model")
    assert "[redacted]" in message and not runs_of_key(message)


def test_every_encoding_and_mixes_of_them():
    h11 = repr(f"Bearer {KEY}\n".encode())  # how h11 prints an illegal header value: b'Bearer sk-...\\n'
    forms = [
        json.dumps(KEY),
        "".join(f"\\u{ord(c):04x}" for c in KEY),  # JSON \u escapes
        KEY.replace("-", "\\/"),  # JSON-escaped slashes where dashes were
        urllib.parse.quote(KEY, safe=""),
        "".join(f"%{ord(c):02X}" for c in KEY),  # every character percent-encoded
        KEY[:10] + "".join(f"%{ord(c):02x}" for c in KEY[10:20]) + KEY[20:],  # a mix
        h11,
        repr(KEY.encode()),
    ]
    for form in forms:
        message = redact(f"Illegal header value {form}")
        assert "[redacted]" in message and not runs_of_key(message), form


def test_a_key_with_a_newline_or_non_ascii_characters_is_redacted_in_a_bytes_repr():
    odd = "sk-odd-key\n4Zq8Kd€2Lm9"
    remember(odd)
    for form in (repr(f"Bearer {odd}".encode()), odd, json.dumps(odd), urllib.parse.quote(odd)):
        message = redact(form)
        assert "4Zq8Kd" not in message and "sk-odd" not in message and "Lm9" not in message.replace("[redacted]", "")


def test_short_runs_and_other_text_are_left_alone():
    text = f"model gpt-test answered in 3s; key ends in {KEY[-4:]}"  # 4 characters: the usual masked hint
    assert redact(text) == text


def test_contains_secret_finds_the_whole_key_in_any_encoding_only():
    assert contains_secret(f"https://x/v1/{urllib.parse.quote(KEY)}/chat", KEY)
    assert contains_secret(json.dumps({"k": KEY}), KEY)
    assert not contains_secret(KEY[:-1], KEY) and not contains_secret("", KEY)


def test_stored_text_is_redacted_whole_and_in_part_and_kept_whole():
    from comlrl_lightning.comparators.redaction import redact_stored

    long_tail = "a" * (1 << 17)  # past the 64 KiB an error message is read to
    text = f"echo {KEY} and {KEY[:-5]}, {urllib.parse.quote(KEY)} {json.dumps(KEY)[1:-1]}" + long_tail + KEY[3:]
    stored = redact_stored(text)
    assert runs_of_key(stored) == [] and not contains_secret(stored, KEY)
    assert stored.startswith("echo [redacted] and [redacted], ") and stored.endswith(long_tail + "[redacted]")
    assert redact_stored("no secret here") == "no secret here"


def test_a_short_remembered_key_is_not_redacted_from_stored_text():
    from comlrl_lightning.comparators.redaction import redact_stored

    remember("Qz7w")  # a short placeholder key: no secret, and it would match ordinary text
    assert redact_stored("Qz7w is in this text") == "Qz7w is in this text"
