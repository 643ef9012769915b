"""The API comparator tests' shared parts: the fake key and its variable, the items and prompts
sampled, and a comparator bound to a team and talking to a :class:`tests.helpers.fake_providers.FakeProvider`."""

from __future__ import annotations

import dataclasses

from comlrl_lightning import GenerationSettings
from comlrl_lightning.comparators import ApiComparator, ComparatorContext, HttpOptions
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.runtime.rng import RandomStream

KEY_ENV = "COMLRL_TEST_API_KEY"
KEY = "sk-test-9f3c1e7a5b2d4c6e8a0b"
ITEMS = [{"prompt": "sun"}, {"prompt": "moon"}]
PROMPTS = [["write: sun", "match: sun"], ["write: moon", "match: moon"]]
SETTINGS = GenerationSettings(max_new_tokens=7, temperature=0.9, top_p=0.95, top_k=None)


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
