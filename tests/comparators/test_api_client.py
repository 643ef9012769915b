"""The API comparator's HTTP transport (api_client.py) against real HTTP servers on 127.0.0.1: retries
and backoff, timeouts and deadlines, errors that are not retried, hostile servers, and the key, which
no error shows and which is checked before any request.

Every test talks HTTP to a :class:`tests.helpers.fake_providers.FakeProvider`; nothing of the client side
is mocked.
"""

from __future__ import annotations

import json
import time
import traceback

import pytest

from comlrl_lightning import OptionError
from comlrl_lightning.comparators import ApiComparator, ComparatorApiError, HttpOptions
from tests.helpers.api_comparator import ITEMS, KEY, KEY_ENV, PROMPTS, SETTINGS, bind, make, texts
from tests.helpers.fake_providers import FakeProvider, Fault

pytestmark = pytest.mark.usefixtures("api_key")


# ----------------------------------------------------------------------------------------------
# Retries, timeouts and errors


def test_429_honours_retry_after_then_succeeds(team):
    with FakeProvider("openai") as provider:
        provider.fail_next(Fault(429, headers={"Retry-After": "1"}))
        # a backoff of 5 s would show if Retry-After were ignored
        comparator = make(team, provider, backoff_base=5.0, concurrency=1)
        started = time.perf_counter()
        result = comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
        elapsed = time.perf_counter() - started
    assert 0.9 <= elapsed < 2.4
    assert comparator.metrics() == {
        "comparator/api_shortfall": 0.0,
        "comparator/api_requests": 5.0,
        "comparator/api_retries": 1.0,
        "comparator/api_truncated": 0.0,
    }
    assert all(len(per_item) == 2 for per_agent in result for per_item in per_agent)


def test_retry_after_is_capped(team):
    with FakeProvider("openai") as provider:
        provider.fail_next(Fault(429, headers={"Retry-After": "3600"}))
        started = time.perf_counter()
        make(team, provider, retry_after_cap=0.1).sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert time.perf_counter() - started < 2


def test_500_then_success_gives_the_same_candidates_as_no_fault(team):
    with FakeProvider("openai") as provider:
        clean = texts(make(team, provider).sample(ITEMS, PROMPTS, 2, SETTINGS))
    with FakeProvider("openai") as provider:
        provider.fail_next(Fault(500), Fault(502), Fault(503))
        comparator = make(team, provider)
        assert texts(comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)) == clean
    assert comparator.metrics()["comparator/api_retries"] == 3.0


def test_persistent_5xx_fails_after_bounded_retries(team):
    with FakeProvider("openai") as provider:
        provider.always = Fault(503, body=b"upstream overloaded")
        with pytest.raises(ComparatorApiError, match=r"after 3 attempts; last: HTTP 503: upstream overloaded"):
            make(team, provider, max_retries=2, concurrency=1).sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert len(provider.requests) == 3


def test_hung_connection_times_out_and_is_retried(team):
    with FakeProvider("openai") as provider:
        provider.fail_next(Fault(hang=True))
        comparator = make(team, provider, timeout=0.3, concurrency=1)
        assert all(len(c) == 2 for a in comparator.sample(ITEMS, PROMPTS, 2, SETTINGS) for c in a)
    assert comparator.metrics()["comparator/api_retries"] == 1.0
    with FakeProvider("openai") as provider:
        provider.always = Fault(hang=True)
        started = time.perf_counter()
        with pytest.raises(ComparatorApiError, match=r"after 2 attempts; last: no response within timeout=0.2s"):
            make(team, provider, timeout=0.2, max_retries=1).sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert time.perf_counter() - started < 3


def test_malformed_json_is_a_clear_error_without_retry(team):
    with FakeProvider("openai") as provider:
        provider.fail_next(Fault(200, body=b"<html><body>Bad gateway</body></html>"))
        with pytest.raises(ComparatorApiError, match=r"non-JSON response \(HTTP 200\): <html><body>Bad gateway"):
            make(team, provider, concurrency=1).sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert len(provider.requests) == 1


def test_401_is_not_retried_and_never_shows_the_key(team):
    echo = f'{{"error": {{"message": "Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}}}'.encode()
    with FakeProvider("openai") as provider:
        provider.always = Fault(401, body=echo)
        with pytest.raises(ComparatorApiError) as error:
            make(team, provider, concurrency=1).sample(ITEMS, PROMPTS, 2, SETTINGS)
    message = "".join(traceback.format_exception(error.value))
    assert "HTTP 401" in message and KEY_ENV in message and "[redacted]" in message
    assert KEY not in message and KEY not in repr(error.value)
    assert error.value.status == 401 and len(provider.requests) == 1


QUOTA = b'{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}'


@pytest.mark.parametrize(
    "status, words, body",
    [
        (402, "insufficient balance", None),
        (400, "rejected the request body", None),
        (403, "may not use this model", None),
        (429, "insufficient quota", QUOTA),  # OpenAI's empty account: a 429 that waiting cannot fix
    ],
)
def test_client_errors_are_not_retried(team, status, words, body):
    with FakeProvider("openai") as provider:
        provider.always = Fault(status, body=body)
        with pytest.raises(ComparatorApiError, match=rf"HTTP {status} \(.*{words}.*(scripted HTTP {status}|quota)"):
            make(team, provider, concurrency=1).sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert len(provider.requests) == 1


def test_missing_key_variable_fails_before_any_request(team, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with FakeProvider("openai") as provider:
        with pytest.raises(ComparatorApiError, match=f"key_env names {KEY_ENV}, but that environment"):
            make(team, provider)
    assert provider.requests == []


# ----------------------------------------------------------------------------------------------
# Options


HTTP_RULES = [
    (dict(timeout=0), "timeout must be > 0."),
    (dict(timeout=float("inf")), "timeout must be > 0."),
    (dict(deadline=0), "deadline must be > 0 or null."),
    (dict(max_response_bytes=0), "max_response_bytes must be >= 1."),
    (dict(concurrency=0), "concurrency must be >= 1."),
    (dict(max_retries=-1), "max_retries must be >= 0."),
]


@pytest.mark.parametrize("options, message", HTTP_RULES)
def test_http_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        HttpOptions(**options)
    assert message in str(error.value)


# ----------------------------------------------------------------------------------------------
# No error shows the key


def _unicode_escaped(text):
    return "".join(f"\\u{ord(c):04x}" for c in text)


@pytest.mark.parametrize(
    "status, body",
    [
        (200, json.dumps({"error": {"message": f"invalid key {KEY}"}}).encode()),  # a 200 with an error object
        (500, ("x" * 290 + KEY + "y" * 50).encode()),  # the key straddles the 300-character cut
        (400, ('{"error": "bad key \\"' + _unicode_escaped(KEY) + '\\""}').encode()),  # JSON \\u escapes
        (401, ("key%3D" + "".join(f"%{ord(c):02X}" for c in KEY)).encode()),  # URL-encoded, every character
    ],
    ids=["200-error-object", "straddling-the-cut", "json-escaped", "url-encoded"],
)
def test_no_error_path_shows_the_key_or_a_prefix_of_it(team, status, body):
    with FakeProvider("openai") as provider:
        provider.always = Fault(status, body=body) if status != 200 else Fault(payload=json.loads(body))
        comparator = make(team, provider, concurrency=1, max_retries=1)
        with pytest.raises(ComparatorApiError) as error:
            comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    message = "".join(traceback.format_exception(error.value))
    assert "[redacted]" in message
    for leak in (KEY, KEY[:8], KEY[-8:], _unicode_escaped(KEY)[:30], "".join(f"%{ord(c):02X}" for c in KEY)[:12]):
        assert leak not in message


# ----------------------------------------------------------------------------------------------
# Hostile servers: decompression bombs, dripping answers


def test_a_decompression_bomb_is_capped_and_not_retried(team):
    bomb = {"choices": [{"message": {"content": "a" * 20_000_000}}]}  # 20 MB decoded, about 20 KB on the wire
    with FakeProvider("openai") as provider:
        provider.always = Fault(payload=bomb, gzip=True)
        comparator = make(team, provider, concurrency=1, max_response_bytes=1_000_000)
        with pytest.raises(ComparatorApiError, match="more than max_response_bytes=1000000 bytes"):
            comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert len(provider.requests) == 1


def test_a_dripping_server_meets_the_total_deadline(team):
    with FakeProvider("openai") as provider:
        provider.always = Fault(payload={"choices": [{"message": {"content": "x" * 200}}]}, drip=0.05)
        comparator = make(team, provider, concurrency=1, max_retries=1, timeout=1.0, deadline=0.5)
        started = time.perf_counter()
        with pytest.raises(ComparatorApiError, match="no complete response within deadline=0.5s"):
            comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
        elapsed = time.perf_counter() - started
    assert elapsed < 3.0  # two attempts of 0.5 s and a short backoff, not 10 s of dripping per attempt
    assert len(provider.requests) == 2


# ----------------------------------------------------------------------------------------------
# Keys by value: echoed in part, or unsendable


def test_a_server_echoing_the_key_minus_its_last_characters_shows_no_piece_of_it(team):
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY[:-4]}"}}).encode()
    with FakeProvider("openai") as provider:
        provider.always = Fault(401, body=echo)
        with pytest.raises(ComparatorApiError) as error:
            make(team, provider, concurrency=1).sample(ITEMS, PROMPTS, 2, SETTINGS)
    message = "".join(traceback.format_exception(error.value))
    assert "[redacted]" in message
    assert not [KEY[i : i + 6] for i in range(len(KEY) - 5) if KEY[i : i + 6] in message]


@pytest.mark.parametrize(
    "value, kind, position",
    [
        (KEY[:10] + "\n" + KEY[10:], "a line break", 11),  # two lines pasted into the variable
        (KEY[:5] + "€" + KEY[5:], "a non-ASCII character", 6),
        (KEY[:3] + "\x07" + KEY[3:], "a control character", 4),
    ],
)
def test_a_key_that_cannot_be_sent_is_named_before_any_request_and_never_shown(
    team, monkeypatch, value, kind, position
):
    from comlrl_lightning.errors import ConfigurationError

    monkeypatch.setenv(KEY_ENV, value)
    with FakeProvider("openai") as provider:
        comparator = bind(ApiComparator(url=provider.url, format="openai", key_env=KEY_ENV), team)
        with pytest.raises(ConfigurationError) as error:
            comparator.start_round(0)
    message = "".join(traceback.format_exception(error.value))
    assert f"the key in {KEY_ENV} has {kind} at character {position}" in message
    assert KEY[:6] not in message and KEY[-6:] not in message and not provider.requests


def test_a_key_read_from_a_file_with_its_final_newline_is_sent_without_it(team, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY + "\n")
    with FakeProvider("openai") as provider:
        make(team, provider).sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert {r.headers["authorization"] for r in provider.requests} == {f"Bearer {KEY}"}
