"""The API comparator (api.py): its options, the candidates it makes of the answers (asked again, cut to
the smallest count, cut to the token budget), and its example configs and command-line errors.

The HTTP tests talk to a :class:`tests.helpers.fake_providers.FakeProvider`; nothing of the client side is
mocked. The wire formats are tested in test_api_formats.py, the HTTP transport in test_api_client.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from comlrl_lightning import IterativePreferenceDataModule, OptionError
from comlrl_lightning.comparators import API_FORMATS, ApiComparator, ComparatorApiError
from comlrl_lightning.rounds.replay import CurrentReplay
from tests.helpers.api_comparator import ITEMS, KEY, PROMPTS, SETTINGS, make
from tests.helpers.fake_providers import FakeProvider, Fault

pytestmark = pytest.mark.usefixtures("api_key")

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


# ----------------------------------------------------------------------------------------------
# Fewer candidates than asked: asked again for the rest, or cut to the smallest count


def test_openai_server_that_ignores_n_is_asked_again_for_the_rest(team):
    with FakeProvider("openai", max_choices=1) as provider:
        comparator = make(team, provider, model="local-model")
        result = comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)
    assert sorted(body["n"] for body in provider.bodies()) == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    assert all(len(per_item) == 3 for per_agent in result for per_item in per_agent)
    assert comparator.metrics()["comparator/api_shortfall"] == 0.0


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


@pytest.mark.parametrize("options, message", API_RULES)
def test_api_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        ApiComparator(**{"url": URL, **options})
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
# Completions longer than the token budget


def test_completions_longer_than_the_token_budget_are_cut_on_arrival(team):
    with FakeProvider("generic", text=lambda prompt, j: "aeiou" * 40) as provider:
        comparator = make(team, provider)
        result = comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    budget = SETTINGS.max_new_tokens
    completions = [c for per_agent in result for per_item in per_agent for c in per_item]
    assert completions and all(len(c.ids) == budget for c in completions)  # 200 characters cut to 6 tokens
    assert {c.text for c in completions} == {("aeiou" * 40)[:budget]}  # the text follows the ids it was cut to
    assert comparator.metrics()["comparator/api_truncated"] == 2 * len(ITEMS) * 2
