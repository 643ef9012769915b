"""Credentials refused wherever the config would store them: by name, by shape and by the key's value."""

from __future__ import annotations

import pytest

from comlrl_lightning.comparators import ApiComparator
from comlrl_lightning.comparators.credentials import check_config_has_no_key
from comlrl_lightning.errors import ConfigurationError

KEY_ENV = "COMLRL_TEST_CREDENTIALS_KEY"
KEY = "fake-9Tq4Wm2Xv7Kp1Lz8"  # no known key shape: found only by its value
URL = "http://127.0.0.1:9/v1/chat/completions"
BEARER = "Bearer fake0123456789abcdef"
SK = "sk-fake0123456789abcdef"


@pytest.mark.parametrize(
    "options, place",
    [
        (dict(extra_body={"api_key": "fake-value"}), "extra_body must not carry a credential (extra_body.api_key)"),
        (dict(extra_body={"metadata": {"x-api-key": "v"}}), "(extra_body.metadata.x-api-key)"),
        (dict(extra_body={"user": BEARER}), "extra_body must not carry a credential (extra_body.user holds one)"),
        (dict(extra_body={"stop": ["x", SK]}), "(extra_body.stop[1] holds one)"),
        (dict(headers={"X-Custom": BEARER}), "headers must not carry a credential (the value of X-Custom)"),
        (dict(headers={"X-Org": SK}), "headers must not carry a credential (the value of X-Org)"),
        (dict(url=f"http://127.0.0.1:9/v1/{SK}/chat"), "url must not carry a credential: its path holds one"),
        (dict(url=f"{URL}#token={SK}"), "url must not carry a credential in its fragment (token=...)"),
        (dict(url=f"{URL}#{SK}"), "url must not carry a credential: its fragment holds one"),
        (dict(url=f"{URL}?sig=abc123&se=2030"), "url must not carry a credential in its query (sig=...)"),
        (dict(url=f"{URL}?X-Amz-Signature=abc"), "in its query (X-Amz-Signature=...)"),
        (dict(url=f"{URL}?q={SK}"), "url must not carry a credential: its query holds one"),
        (dict(url=f"{URL}?q=Bearer%20fake0123456789"), "its query holds one"),  # URL-encoded
    ],
)
def test_credentials_by_name_and_by_shape_are_refused_without_echoing_them(options, place):
    with pytest.raises(ConfigurationError) as error:
        ApiComparator(**{"url": URL, **options})
    message = str(error.value)
    assert place in message and "key_env" in message
    assert "fake" not in message.replace("COMLRL", "")


def test_ordinary_options_pass():
    ApiComparator(
        url=f"{URL}?model=m&api-version=2024-02-01",
        headers={"anthropic-version": "2023-06-01", "X-Title": "a basic run"},
        extra_body={"max_tokens": 32, "max_completion_tokens": 8, "top_k": 4, "stop": ["task-done"], "user": "u1"},
    )


def test_the_keys_value_is_refused_in_any_option_by_value(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY + "\n")  # as $(cat keyfile) might leave it
    for options, place in [
        (dict(model=KEY), "model holds the value of COMLRL_TEST_CREDENTIALS_KEY"),
        (dict(extra_body={"metadata": {"note": f"key={KEY}"}}), "extra_body.metadata.note holds the value"),
        (dict(url=f"http://127.0.0.1:9/{KEY}/v1"), "url holds the value"),
        (dict(headers={"X-Note": KEY}), "headers.X-Note holds the value"),
    ]:
        with pytest.raises(ConfigurationError) as error:
            ApiComparator(**{"url": URL, "key_env": KEY_ENV, **options})
        assert place in str(error.value) and KEY not in str(error.value)


def test_a_key_set_after_the_comparator_was_made_is_checked_when_the_round_starts(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    comparator = ApiComparator(url=URL, key_env=KEY_ENV, model=KEY)  # no key yet: nothing to compare
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(ConfigurationError, match="model holds the value of COMLRL_TEST_CREDENTIALS_KEY"):
        comparator.start_round(0)


def test_the_whole_config_is_searched_for_every_named_keys_value(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    config = {
        "model": {"init_args": {"team": {"agent_model": "embedded"}}},
        "data": {"init_args": {"comparator": {"init_args": {"key_env": KEY_ENV}}, "preference_replay_dir": KEY}},
    }
    with pytest.raises(
        ConfigurationError, match=rf"^data.init_args.preference_replay_dir holds the value of {KEY_ENV}"
    ):
        check_config_has_no_key(config)
    config["data"]["init_args"]["preference_replay_dir"] = "runs/replay"
    check_config_has_no_key(config)


def test_a_short_key_value_is_not_searched_for(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "x")  # a local server's placeholder key: no secret, and in every other word
    ApiComparator(url=URL, key_env=KEY_ENV, model="x-large")
    check_config_has_no_key({"a": {"key_env": KEY_ENV}, "b": "x-large"})
