"""The API comparator's wire formats (api_formats.py): each format's request bodies and headers as a real
HTTP server receives them, and the parsing of each format's answers.

The HTTP tests talk to a :class:`tests.helpers.fake_providers.FakeProvider` speaking one provider's wire
format; nothing of the client side is mocked.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from comlrl_lightning.comparators.api_formats import (
    ApiResponseError,
    is_deepseek,
    json_safe,
    parse_generic,
    parse_openai,
)
from tests.helpers.api_comparator import ITEMS, KEY, PROMPTS, SETTINGS, make, texts
from tests.helpers.fake_providers import FakeProvider, fake_text

pytestmark = pytest.mark.usefixtures("api_key")


def assert_ids_from_actor_tokenizer(team, completions):
    for agent, per_agent in enumerate(completions):
        for per_item in per_agent:
            for c in per_item:
                assert c.ids == team.tokenizers[agent](c.text, add_special_tokens=False)["input_ids"]


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
