"""API comparator against real HTTP servers on 127.0.0.1: wire formats, faults, options.

Every test talks HTTP to a :class:`tests.helpers.fake_providers.FakeProvider` speaking one provider's wire
format; nothing of the client side is mocked.
"""

from __future__ import annotations

import dataclasses
import json
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

from comlrl_lightning import (
    GenerationSettings,
    IterativePreferenceDataModule,
    OptionError,
    Team,
)
from comlrl_lightning.comparators import (
    API_FORMATS,
    ApiComparator,
    ComparatorApiError,
    ComparatorContext,
    HttpOptions,
)
from comlrl_lightning.comparators.api_formats import (
    ApiResponseError,
    is_deepseek,
    json_safe,
    parse_generic,
    parse_openai,
)
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.rounds.replay import CurrentReplay
from comlrl_lightning.runtime.rng import RandomStream
from tests.helpers.fake_providers import FakeProvider, Fault, fake_text

KEY_ENV = "COMLRL_TEST_API_KEY"
KEY = "sk-test-9f3c1e7a5b2d4c6e8a0b"
ITEMS = [{"prompt": "sun"}, {"prompt": "moon"}]
PROMPTS = [["write: sun", "match: sun"], ["write: moon", "match: moon"]]
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SETTINGS = GenerationSettings(max_new_tokens=7, temperature=0.9, top_p=0.95, top_k=None)


@pytest.fixture(scope="module")
def team():
    return Team(["embedded", "embedded"])


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def bind(comparator, team):
    comparator.bind(
        ComparatorContext(
            actors=lambda: team,
            generator=HFGenerator(),
            stream=RandomStream(0),
            agent_devices=["cpu"] * team.num_agents,
        )
    )
    return comparator


HTTP = {field.name for field in dataclasses.fields(HttpOptions)}


def make(team, provider, fmt=None, backoff_base=0.01, retry_after_cap=None, **options):
    """A bound comparator talking to ``provider``, its round started (the key is checked there);
    ``options`` of :class:`HttpOptions` go to its ``http``."""
    http = HttpOptions(**{name: options.pop(name) for name in list(options) if name in HTTP})
    comparator = ApiComparator(
        **{"url": provider.url, "format": fmt or provider.fmt, "key_env": KEY_ENV, "http": http, **options}
    )
    # class attributes, not config options: set on the instance before the client is made
    comparator.backoff_base = backoff_base
    if retry_after_cap is not None:
        comparator.retry_after_cap = retry_after_cap
    bind(comparator, team).start_round(0)
    # the lazily made client carries what was set (the timing tests rely on it)
    assert comparator.client.backoff_base == backoff_base
    assert comparator.client.retry_after_cap == comparator.retry_after_cap
    return comparator


def texts(completions):
    return [[[c.text for c in per_item] for per_item in per_agent] for per_agent in completions]


def assert_ids_from_actor_tokenizer(team, completions):
    for agent, per_agent in enumerate(completions):
        for per_item in per_agent:
            for c in per_item:
                assert c.ids == team.tokenizers[agent](c.text, add_special_tokens=False)["input_ids"]


# ----------------------------------------------------------------------------------------------
# Wire formats


def test_openai_chat_bodies_headers_n_batching_and_parsing(team):
    with FakeProvider("openai") as provider:
        comparator = make(
            team, provider, "openai", model="gpt-4o-mini", max_n_per_request=2, extra_body={"seed": 7, "top_p": None}
        )
        result = comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)
    assert {r.path for r in provider.requests} == {"/v1/chat/completions"}
    for request in provider.requests:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert request.headers["content-type"] == "application/json"
    expected = [
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": prompt}],
            "n": n,
            "max_tokens": 7,
            "temperature": 0.9,
            "seed": 7,
        }  # top_p removed by the null in extra_body
        for prompt in sorted(p for pair in PROMPTS for p in pair)
        for n in (2, 1)
    ]
    key = lambda body: (body["messages"][0]["content"], -body["n"])  # noqa: E731
    assert sorted(provider.bodies(), key=key) == expected
    # candidates in request order: the n=2 batch, then the n=1 batch
    assert texts(result) == [
        [[fake_text(p[a], 0), fake_text(p[a], 1), fake_text(p[a], 0)] for p in PROMPTS] for a in range(2)
    ]
    assert_ids_from_actor_tokenizer(team, result)
    assert comparator.metrics() == {
        "comparator/api_shortfall": 0.0,
        "comparator/api_requests": 8.0,
        "comparator/api_retries": 0.0,
        "comparator/api_truncated": 0.0,
    }


def test_openai_deepseek_asks_one_candidate_per_request(team):
    assert is_deepseek("https://api.deepseek.com/chat/completions", None)
    assert not is_deepseek("https://api.openai.com/v1/chat/completions", "gpt-4o")
    with FakeProvider("openai") as provider:
        result = make(team, provider, model="deepseek-chat").sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert [body["n"] for body in provider.bodies()] == [1] * 8
    assert all(len(per_item) == 2 for per_agent in result for per_item in per_agent)


def test_openai_server_that_ignores_n_is_asked_again_for_the_rest(team):
    with FakeProvider("openai", max_choices=1) as provider:
        comparator = make(team, provider, model="local-model")
        result = comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)
    assert sorted(body["n"] for body in provider.bodies()) == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    assert all(len(per_item) == 3 for per_agent in result for per_item in per_agent)
    assert comparator.metrics()["comparator/api_shortfall"] == 0.0


def test_anthropic_messages_bodies_headers_and_first_text_block(team):
    with FakeProvider("anthropic") as provider:
        result = make(team, provider, "anthropic", model="claude-test", extra_body={"system": "be brief"}).sample(
            ITEMS, PROMPTS, 2, SETTINGS
        )
    assert {r.path for r in provider.requests} == {"/v1/messages"}
    for request in provider.requests:
        assert request.headers["x-api-key"] == KEY  # not "Bearer <key>", and no Authorization header
        assert "authorization" not in request.headers
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert request.body == {
            "model": "claude-test",
            "max_tokens": 7,
            "messages": [{"role": "user", "content": request.body["messages"][0]["content"]}],
            "temperature": 0.9,
            "system": "be brief",
        }
    assert len(provider.requests) == 8  # one request per candidate
    # the thinking block is skipped, the second text block ignored
    assert all(
        sorted(per_item) == sorted([fake_text(p[a], 0), fake_text(p[a], 1)])
        for a, per_agent in enumerate(texts(result))
        for per_item, p in zip(per_agent, PROMPTS)
    )
    assert_ids_from_actor_tokenizer(team, result)

    with FakeProvider("anthropic") as provider:
        make(
            team, provider, headers={"Anthropic-Version": "2024-10-22"}, key_header="X-Other", key_prefix="Token"
        ).sample(ITEMS[:1], PROMPTS[:1], 1, SETTINGS)
    assert provider.requests[0].headers["anthropic-version"] == "2024-10-22"  # the user's header wins
    assert provider.requests[0].headers["x-other"] == f"Token {KEY}"


def test_openai_responses_bodies_and_output_text(team):
    with FakeProvider("openai_responses") as provider:
        result = make(team, provider, "openai_responses", model="gpt-5-codex").sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert {r.path for r in provider.requests} == {"/v1/responses"}
    for request in provider.requests:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert request.body == {"model": "gpt-5-codex", "input": request.body["input"], "max_output_tokens": 7}
    assert sorted(r.body["input"] for r in provider.requests) == sorted(
        p for pair in PROMPTS for p in pair for _ in (0, 1)
    )
    assert all(
        sorted(per_item) == sorted([fake_text(p[a], 0), fake_text(p[a], 1)])
        for a, per_agent in enumerate(texts(result))
        for per_item, p in zip(per_agent, PROMPTS)
    )


def test_generic_body_json_safe_item_dotted_field_and_custom_key_header(team):
    items = [
        {
            "prompt": "sun",
            "vec": torch.tensor([1.5, 2.0]),
            "n": np.int64(3),
            "tags": {"b"},
            "score": float("nan"),
            "when": object.__new__(type("Stamp", (), {"__str__": lambda s: "stamp"})),
        }
    ]
    shape = lambda texts_: {"data": {"outputs": [{"text": t} for t in texts_] + [None]}}  # noqa: E731
    with FakeProvider("generic", generic_shape=shape) as provider:
        comparator = make(team, provider, response_field="data.outputs", key_header="X-Token", key_prefix="")
        result = comparator.sample(items, PROMPTS[:1], 3, SETTINGS)
    assert provider.requests[0].path == "/generate"
    assert provider.requests[0].headers["x-token"] == KEY
    assert "authorization" not in provider.requests[0].headers
    bodies = sorted(provider.bodies(), key=lambda body: body["agent_idx"])  # requests run concurrently
    assert bodies[0] == {
        "prompt": "write: sun",
        "agent_idx": 0,
        "num_return_sequences": 3,
        "max_new_tokens": 7,
        "temperature": 0.9,
        "top_p": 0.95,
        "top_k": None,
        "batch_item": {"prompt": "sun", "vec": [1.5, 2.0], "n": 3, "tags": ["b"], "score": "nan", "when": "stamp"},
    }  # no "model": none was configured
    assert [b["agent_idx"] for b in bodies] == [0, 1]
    assert texts(result) == [[[fake_text(PROMPTS[0][a], j) for j in range(3)]] for a in range(2)]


def test_generic_and_openai_parsing_rules():
    assert parse_generic({"completions": "one"}, "completions") == ["one"]
    assert parse_generic({"result": {"items": ["a", "b"]}}, "result.items") == ["a", "b"]
    assert parse_generic({"result": [{"x": 1}, {"text": "t"}]}, "result.1.text") == ["t"]
    assert parse_generic(
        {"outputs": [{"content": "c"}, {"completion": "d"}, {"message": {"content": "e"}}, 4]}, "missing.path"
    ) == ["c", "d", "e", "4"]
    assert parse_generic({"completions": None}, "completions") == []
    assert parse_generic({"completions": 7}, "completions") == ["7"]
    assert parse_generic(["bare", "list"], "completions") == ["bare", "list"]
    with pytest.raises(ApiResponseError, match="response_field='data'"):
        parse_generic({"unrelated": 1}, "data")
    assert parse_openai(
        {
            "choices": [
                {"text": "legacy"},
                {"message": {"content": None}},
                {"message": {"content": [{"type": "text", "text": "pa"}, {"text": "rts"}]}},
            ]
        }
    ) == ["legacy", "parts"]
    with pytest.raises(ApiResponseError, match="no 'choices' field"):
        parse_openai({"error": {"message": "overloaded"}})
    assert json_safe({1: (float("inf"), None)}) == {"1": ["inf", None]}


# ----------------------------------------------------------------------------------------------
# Faults


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


def test_empty_choice_list_is_a_counted_shortfall_and_all_empty_is_an_error(team):
    empty = {"id": "chatcmpl-x", "object": "chat.completion", "choices": [], "usage": {"total_tokens": 0}}
    with FakeProvider("openai") as provider:
        provider.fail_next(Fault(payload=empty))  # the first request: agent 0, item 0
        comparator = make(team, provider, concurrency=1)
        result = comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    # joint candidates pair index j of every agent: item 0 is cut to 0 for both agents
    assert [[len(per_item) for per_item in per_agent] for per_agent in result] == [[0, 2], [0, 2]]
    assert comparator.metrics()["comparator/api_shortfall"] == 4.0
    with FakeProvider("openai") as provider:
        provider.always = Fault(payload=empty)
        with pytest.raises(ComparatorApiError, match="returned no usable completions this round"):
            make(team, provider).sample(ITEMS, PROMPTS, 2, SETTINGS)


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
# Options (checked when the comparator is made, i.e. while the CLI instantiates the config)

URL = "http://127.0.0.1:9/v1/chat/completions"
API_RULES = [
    (dict(format="gemini"), "format must be one of: generic, openai, anthropic, openai_responses."),
    (dict(url=""), "ApiComparator needs a url."),
    (dict(url="   "), "ApiComparator needs a url."),
    (dict(max_n_per_request=0), "max_n_per_request must be >= 1 or null."),
    (dict(num_candidates=0), "num_candidates must be >= 1 or null."),
    (dict(headers={"Authorization": "Bearer x"}), "headers must not carry a credential (Authorization)"),
    (dict(headers={"x-api-key": "x"}), "headers must not carry a credential (x-api-key)"),
    (dict(key_header="X-Token", headers={"x-token": "x"}), "headers must not carry a credential (x-token)"),
    (dict(key_header="X-Custom", headers={"x-custom": "x"}), "headers must not carry the credential (x-custom)"),
    (dict(headers={"X-Retries": 3}), "headers must map header names to strings."),
    (dict(extra_body=["seed", 7]), "extra_body must be a mapping."),
    (dict(response_field=" "), "response_field must not be empty."),
]


HTTP_RULES = [
    (dict(timeout=0), "timeout must be > 0."),
    (dict(timeout=float("inf")), "timeout must be > 0."),
    (dict(deadline=0), "deadline must be > 0 or null."),
    (dict(max_response_bytes=0), "max_response_bytes must be >= 1."),
    (dict(concurrency=0), "concurrency must be >= 1."),
    (dict(max_retries=-1), "max_retries must be >= 0."),
]


@pytest.mark.parametrize("options, message", API_RULES)
def test_api_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        ApiComparator(**{"url": URL, **options})
    assert message in str(error.value)


@pytest.mark.parametrize("options, message", HTTP_RULES)
def test_http_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        HttpOptions(**options)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "removed", ["chat", "OpenAI_Chat", "messages", "anthropic_messages", "responses", "codex", " Generic ", "OPENAI"]
)
def test_format_aliases_are_refused(removed):
    # only the four canonical names: no normalising, no aliases
    with pytest.raises(OptionError, match="format must be one of: generic, openai, anthropic, openai_responses."):
        ApiComparator(url=URL, format=removed)


def test_a_key_pasted_into_key_env_is_refused_without_echoing_it():
    with pytest.raises(OptionError) as error:
        ApiComparator(url=URL, key_env=KEY)
    assert "key_env must be the NAME of an environment variable" in str(error.value) and KEY not in str(error.value)


def test_defaults_and_a_lazy_client(team):
    comparator = ApiComparator(url=URL)
    assert (
        comparator.format,
        comparator.model,
        comparator.key_env,
        comparator.http.timeout,
        comparator.key_header,
        comparator.key_prefix,
        comparator.headers,
        comparator.response_field,
        comparator.extra_body,
        comparator.max_n_per_request,
        comparator.http.concurrency,
        comparator.http.max_retries,
        comparator.num_candidates,
    ) == ("generic", None, None, 120.0, "Authorization", "Bearer", {}, "completions", {}, None, 8, 4, None)
    assert (ApiComparator.backoff_base, ApiComparator.retry_after_cap) == (1.0, 60.0)
    assert set(API_FORMATS) == {"generic", "openai", "anthropic", "openai_responses"}
    # a plain config object until first use: no client, no binding needed to build it
    assert comparator._client is None
    with pytest.raises(RuntimeError, match="ApiComparator is not bound"):
        comparator.sample(ITEMS, PROMPTS, 1, SETTINGS)
    comparator.backoff_base, comparator.retry_after_cap = 0.25, 3.0
    client = comparator.client
    assert comparator.client is client  # made once
    assert (
        client.url,
        client.timeout,
        client.key_env,
        client.max_retries,
        client.concurrency,
        client.backoff_base,
        client.retry_after_cap,
        client.anthropic,
    ) == (URL, 120.0, None, 4, 8, 0.25, 3.0, False)
    assert ApiComparator.backoff_base == 1.0  # the instance's setting, not the class's
    assert ApiComparator(url=URL, format="anthropic").client.anthropic
    # the data module takes the comparator object (its num_candidates is K')
    data = IterativePreferenceDataModule(
        comparator=ApiComparator(url=URL, format="openai", num_candidates=3), replay=CurrentReplay()
    )
    assert isinstance(data.comparator, ApiComparator) and data.comparator.num_candidates == 3


def test_repr_shows_no_query():
    comparator = ApiComparator(
        url="https://api.example.invalid/v1/chat/completions?deployment=abc", format="openai", model="m"
    )
    assert repr(comparator) == (
        "ApiComparator(url='https://api.example.invalid/v1/chat/completions', format='openai', model='m')"
    )


# ----------------------------------------------------------------------------------------------
# The CLI: a bad comparator option fails while the config is parsed / instantiated


def cli_fails(tmp_path, capsys, *args):
    from comlrl_lightning.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(CONFIGS / "madpo_iter.yaml"),
                "--config",
                str(CONFIGS / "overlays" / "api_openai.yaml"),
                "--trainer.default_root_dir",
                str(tmp_path),
                *args,
            ]
        )
    assert exit_info.value.code == 2
    assert not (tmp_path / "config.yaml").exists()  # nothing ran
    return capsys.readouterr()


def test_cli_unknown_format_is_an_ordinary_parse_error(tmp_path, capsys):
    err = cli_fails(tmp_path, capsys, "--data.init_args.comparator.init_args.format", "chat").err
    first = err.splitlines()[0]  # the message first: the option, the allowed values, the value given
    assert first.startswith("error: --data.init_args.comparator.init_args.format:") and "Got value: chat" in first
    assert "openai_responses" in first  # the allowed values are listed
    assert len(err.splitlines()) <= 3  # not the parser's usage dump


@pytest.mark.slow
def test_cli_reports_the_comparators_option_errors_as_one_line(tmp_path, capsys):
    err = cli_fails(tmp_path, capsys, "--data.init_args.comparator.init_args.http.timeout", "0").err
    assert "error: timeout must be > 0." in err
    out, err = cli_fails(tmp_path, capsys, "--data.init_args.comparator.init_args.key_env", KEY)
    assert "error: key_env must be the NAME of an environment variable" in err
    assert KEY not in out and KEY not in err


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses", "generic"])
def test_example_configs_name_the_key_variable_and_validate(fmt):
    import importlib
    import re

    def instantiate(spec):
        module, _, name = spec["class_path"].rpartition(".")
        return getattr(importlib.import_module(module), name)(**(spec.get("init_args") or {}))

    from tests.helpers.configs import composed

    path = CONFIGS / "overlays" / f"api_{fmt}.yaml"
    text = path.read_text()
    assert not re.search(r"sk-[A-Za-z0-9]|api_key:", text)  # a variable name only, never a key
    options = composed(path)["data"]["init_args"]
    assert not [name for name in options if name.startswith("comparator_")]  # all inside the comparator object
    spec = options["comparator"]
    assert spec["class_path"] == "comlrl_lightning.comparators.ApiComparator"
    assert re.fullmatch(r"[A-Z_]+", spec["init_args"]["key_env"])
    assert ".invalid" in spec["init_args"]["url"]  # a placeholder that cannot spend money
    comparator = instantiate(spec)
    data = IterativePreferenceDataModule(
        **{**options, "comparator": comparator, "replay": instantiate(options["replay"])}
    )
    assert data.comparator is comparator
    assert comparator.format == {"responses": "openai_responses"}.get(fmt, fmt)
    assert comparator.num_candidates is None  # the comparator samples as many as the team (preference_num_candidates)


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


@pytest.mark.parametrize(
    "options, place",
    [
        (dict(url="http://user:fake-secret@127.0.0.1:9/v1"), "url must not carry credentials (user:password@host)"),
        (
            dict(url="http://127.0.0.1:9/v1?api_key=fake-secret"),
            "url must not carry a credential in its query (api_key=...)",
        ),
        (
            dict(url="http://127.0.0.1:9/v1?access_token=fake-secret"),
            "url must not carry a credential in its query (access_token=...)",
        ),
        (
            dict(url="http://127.0.0.1:9/v1", headers={"X-Auth-Token": "fake-secret"}),
            "headers must not carry a credential (X-Auth-Token)",
        ),
        (
            dict(url="http://127.0.0.1:9/v1", headers={"Cookie": "session=fake-secret"}),
            "headers must not carry a credential (Cookie)",
        ),
        (
            dict(url="http://127.0.0.1:9/v1", headers={"X-Client-Secret": "fake-secret"}),
            "headers must not carry a credential (X-Client-Secret)",
        ),
    ],
)
def test_credentials_in_urls_and_credential_headers_are_refused_without_echoing_them(options, place):
    with pytest.raises(OptionError) as error:
        ApiComparator(**options)
    message = str(error.value)
    assert message.startswith(place) and "key_env" in message and "fake-secret" not in message
    assert ApiComparator(url="http://127.0.0.1:9/v1?model=m", headers={"anthropic-version": "2023-06-01"}).url


# ----------------------------------------------------------------------------------------------
# Hostile servers: decompression bombs, dripping answers, overlong completions


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


def test_completions_longer_than_the_token_budget_are_cut_on_arrival(team):
    with FakeProvider("generic", text=lambda prompt, j: "aeiou" * 40) as provider:
        comparator = make(team, provider)
        result = comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    budget = SETTINGS.max_new_tokens
    completions = [c for per_agent in result for per_item in per_agent for c in per_item]
    assert completions and all(len(c.ids) == budget for c in completions)  # 200 characters cut to 6 tokens
    assert {c.text for c in completions} == {("aeiou" * 40)[:budget]}  # the text follows the ids it was cut to
    assert comparator.metrics()["comparator/api_truncated"] == 2 * len(ITEMS) * 2


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
