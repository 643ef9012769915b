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


@pytest.mark.parametrize(
    "name",
    [
        "X-Api-Sig",
        "XApiSig",
        "X-API-SIG",
        "X-Auth-Token",
        "Authorization",
        "Proxy-Authorization",
        "Cookie",
        "X-Hub-Signature-256",
        "X-Client-Secret",
        "X-Csrf-Token",
        "X-Session-Id",
        "X-Api-Sign",
        "X-Pass",
        "X-Pwd",
        "X-Hmac",
    ],
)
def test_a_credential_shaped_header_name_is_refused_whatever_its_value(name):
    with pytest.raises(ConfigurationError) as error:
        ApiComparator(url=URL, headers={name: "plain-value"})
    assert f"headers must not carry a credential ({name})" in str(error.value) and "plain-value" not in str(error.value)


def test_ordinary_header_and_parameter_names_pass():
    ordinary = ["X-Title", "HTTP-Referer", "OpenAI-Organization", "OpenAI-Project", "anthropic-beta", "X-Request-Id"]
    ordinary += ["User-Agent", "X-Signup-Source", "X-Compass", "Accept-Language"]
    ApiComparator(url=f"{URL}?api-version=2024-02-01&passes=3", headers={name: "v" for name in ordinary})
    with pytest.raises(ConfigurationError, match="in its query \\(api_sig=...\\)"):
        ApiComparator(url=f"{URL}?api_sig=abc")


def test_the_seed_api_refuses_the_keys_value_in_model_config_and_the_model_names(monkeypatch, tmp_path):
    from comlrl_lightning.trainers.configs import MADPOIterConfig
    from comlrl_lightning.trainers.preference import MADPOIterTrainer

    monkeypatch.setenv(KEY_ENV, KEY)
    args = MADPOIterConfig(comparator_policy="api", comparator_api_url=URL, comparator_api_key_env=KEY_ENV)
    for options, place in [
        (dict(model_config={"special_tokens": {"additional_special_tokens": ["<t>", KEY]}}), "model_config.special"),
        (dict(model_config={"model_kwargs": {"attn_implementation": KEY}}), "model_config.model_kwargs.attn_impl"),
        (dict(agents=["embedded", f"org/{KEY}"]), "agents[1] holds the value of COMLRL_TEST_CREDENTIALS_KEY"),
    ]:
        task = dict(train_dataset=[{"prompt": "a"}], reward_func=lambda a, b: [0.0]) if "agents" in options else {}
        options = {"agent_model": "embedded", **options} if "agents" not in options else {**options, **task}
        with pytest.raises(ConfigurationError) as error:
            MADPOIterTrainer(args=args, wandb_config={"output_dir": str(tmp_path / "run")}, **options)
        assert place in str(error.value) and KEY not in str(error.value)
    assert not (tmp_path / "run").exists()
