"""Centralized comparator generation: the tagged protocol, custom adapters, sources, and runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from comlrl_lightning import GenerationSettings, IterativePreferenceDataModule, OptionError, Team
from comlrl_lightning.comparators import (
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
    build_centralized_comparator,
)
from comlrl_lightning.comparators.api import validate_api_options
from comlrl_lightning.comparators.centralized import AdapterError, resolve_adapter
from comlrl_lightning.rng import RandomStream
from tests.centralized_adapters import HalvesAdapter
from tests.fake_providers import FakeProvider
from tests.iterative_run import make_run

ITEMS = [{"prompt": "sun"}, {"prompt": "moon"}]
PROMPTS = [["topic: sun\nwriter:", "topic: sun\nmatcher:"], ["topic: moon\nwriter:", "topic: moon\nmatcher:"]]
SETTINGS = GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None)
CENTRAL = dict(comparator_generation_mode="centralized")


@pytest.fixture(scope="module")
def team():
    """Two agents that differ: agent 1's final layer-norm bias is perturbed, so the slot matters."""
    team = Team(["embedded", "embedded"])
    with torch.no_grad():
        bias = team.agents[1].transformer.ln_f.bias
        bias.add_(2.0 * torch.randn(bias.shape, generator=torch.Generator().manual_seed(0)))
    return team


def build(team, policy="current", slot=1, adapter=None, seed=5, **kwargs):
    options = dict(devices=["cpu", "cpu"], sources=[], snapshots=None, history_k=None, api=None)
    options.update(kwargs)
    comparator = build_centralized_comparator(policy, lambda: team, RandomStream(seed), slot,
                                              adapter or HalvesAdapter(), **options)
    comparator.start_round(0)
    return comparator


# ----------------------------------------------------------------------------------------------
# The tagged protocol (SPEC 6.6)


def test_tagged_prompt_is_the_reference_text():
    prompt = TaggedCentralizedComparatorAdapter().build_prompt({"prompt": "x"}, ["Write a poem.", "Review it.\nBriefly."])
    assert prompt == (
        "You are a centralized coordinator producing the separate outputs of 2 agents.\n\n"
        "Each output must satisfy its corresponding original prompt. Keep the outputs separate;\n"
        "do not merge them or add commentary outside the required tags.\n\n"
        "Agent 0 original prompt:\nWrite a poem.\n\n"
        "Agent 1 original prompt:\nReview it.\nBriefly.\n\n"
        "Return exactly one section for each agent in this format:\n"
        "<agent_0>\n...\n</agent_0>\n<agent_1>\n...\n</agent_1>\n"
    )


def test_tagged_parsing_well_formed_missing_and_no_sections():
    parse = TaggedCentralizedComparatorAdapter().parse_completion
    well_formed = "Sure!\n< Agent_0 >\n  roses are red\n</ agent_0 >\n<AGENT_1>fine\nwork</agent_1> trailing"
    assert parse(well_formed, {}, 2) == ["roses are red", "fine\nwork"]
    assert parse("<agent_0>a</agent_0><agent_0>b</agent_0><agent_1>c</agent_1>", {}, 2) == ["a", "c"]  # first wins
    assert parse("<agent_1> only the second </agent_1>", {}, 3) == ["", "only the second", ""]
    for text in ["no tags at all", "<agent_0>unclosed", "<agent_2>beyond</agent_2>"]:
        with pytest.raises(CentralizedComparatorParseError) as error:
            parse(text, {}, 2)
        assert isinstance(error.value, ValueError)


# ----------------------------------------------------------------------------------------------
# Adapters and options


def test_adapter_by_import_path_class_factory_or_object():
    assert isinstance(resolve_adapter(None), TaggedCentralizedComparatorAdapter)
    for path in ["tests.centralized_adapters.HalvesAdapter", "tests.centralized_adapters.make_halves",
                 "tests.centralized_adapters.INSTANCE"]:
        assert isinstance(resolve_adapter(path), HalvesAdapter)
    data = IterativePreferenceDataModule(**CENTRAL, comparator_centralized_adapter="tests.centralized_adapters.HalvesAdapter")
    assert isinstance(data.comparator_options.adapter, HalvesAdapter)
    assert data.comparator_options.generation_mode == "centralized"


CENTRAL_RULES = [
    (dict(comparator_centralized_adapter="tests.centralized_adapters.NoParser"),
     "comparator_centralized_adapter.parse_completion must be callable."),
    (dict(comparator_centralized_adapter="tests.no_such_module.Adapter"), "comparator_centralized_adapter: cannot import"),
    (dict(comparator_centralized_agent_index=-1), "comparator_centralized_agent_index must be >= 0."),
    (dict(comparator_centralized_agent_index=2, num_agents=2), "comparator_centralized_agent_index must be smaller than num_agents."),
    (dict(comparator_policy="model", comparator_agents=["a", "b", "c"], num_agents=2),
     "comparator_agents length must be 1 or num_agents when comparator_generation_mode='centralized'."),
]


@pytest.mark.parametrize("options, message", CENTRAL_RULES)
def test_centralized_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        IterativePreferenceDataModule(**CENTRAL, **options)
    assert message in str(error.value)


def test_adapter_errors_are_type_errors_too_and_need_centralized_mode():
    with pytest.raises(TypeError, match="comparator_centralized_adapter.parse_completion must be callable."):
        resolve_adapter("tests.centralized_adapters.NoParser")
    assert issubclass(AdapterError, OptionError)
    with pytest.raises(OptionError, match="comparator_centralized_adapter is only valid when comparator_generation_mode='centralized'."):
        IterativePreferenceDataModule(comparator_centralized_adapter="tests.centralized_adapters.HalvesAdapter")


# ----------------------------------------------------------------------------------------------
# Sources


def test_local_source_is_slot_model_with_the_comparator_stream(team):
    comparator = build(team, slot=1)
    result = comparator.sample(ITEMS, PROMPTS, 4, SETTINGS)
    joint = [f"topic: {item['prompt']}\nboth:" for item in ITEMS]
    direct = team.generate(1, joint, 4, SETTINGS, RandomStream(5))  # agent 1, same seed: the same draws
    other = team.generate(0, joint, 4, SETTINGS, RandomStream(5))
    assert [[c.text for c in per_item] for per_item in direct] != [[c.text for c in per_item] for per_item in other]
    dropped = 0
    for k, per_item in enumerate(direct):
        parsed = [c.text for c in per_item if sum(map(ord, c.text)) % 2 == 0]
        dropped += len(per_item) - len(parsed)
        for agent in range(2):
            roles = [HalvesAdapter().parse_completion(t, ITEMS[k], 2)[agent] for t in parsed]
            assert [c.text for c in result[agent][k]] == roles
            assert [c.ids for c in result[agent][k]] == [
                team.tokenizers[agent](r, add_special_tokens=False)["input_ids"] for r in roles]
    assert 0 < dropped < 8, "the seed should give both kinds of completion"
    assert comparator.metrics()["comparator/unparseable"] == float(dropped)


def test_model_policy_loads_one_model_for_the_slot(team):
    comparator = build(team, policy="model", sources=["embedded"])
    assert comparator.local.source().num_agents == 1
    result = comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert len(result) == 2 and all(len(a[k]) == len(result[0][k]) for a in result for k in range(2))


def tagged_or_not(prompt, j):
    return ["<agent_0> hello </agent_0>\n<AGENT_1>world</agent_1>", "no tags here", "<agent_1>only one</agent_1>"][j]


def test_api_source_one_call_per_item_with_the_slot_and_drops_unparseable(team):
    with FakeProvider("generic", text=tagged_or_not) as provider:
        api = validate_api_options(url=provider.url)
        comparator = build(team, policy="api", slot=1, adapter=TaggedCentralizedComparatorAdapter(), api=api)
        result = comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)
    tagged = TaggedCentralizedComparatorAdapter()
    assert sorted((b["prompt"], b["agent_idx"], b["num_return_sequences"]) for b in provider.bodies()) == sorted(
        (tagged.build_prompt(item, prompts), 1, 3) for item, prompts in zip(ITEMS, PROMPTS))
    assert [[c.text for c in per_item] for per_item in result[0]] == [["hello", ""]] * 2
    assert [[c.text for c in per_item] for per_item in result[1]] == [["world", "only one"]] * 2
    assert comparator.metrics() == {"comparator/api_shortfall": 0.0, "comparator/api_requests": 2.0,
                                    "comparator/api_retries": 0.0, "comparator/unparseable": 2.0,
                                    "comparator/empty_sections": 2.0}
    with FakeProvider("generic", text=lambda prompt, j: "never tagged") as provider:
        comparator = build(team, policy="api", adapter=TaggedCentralizedComparatorAdapter(),
                           api=validate_api_options(url=provider.url))
        with pytest.raises(CentralizedComparatorParseError, match="none of this round's 6 completions"):
            comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)


@pytest.mark.parametrize("adapter, error, message", [
    ("WrongCount", ValueError, "must return exactly 2 outputs; got 1."),
    ("NotASequence", TypeError, "must return a sequence of strings, not str."),
])
def test_parser_output_contract(team, adapter, error, message):
    comparator = build(team, adapter=resolve_adapter(f"tests.centralized_adapters.{adapter}"))
    with pytest.raises(error, match=message):
        comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)


# ----------------------------------------------------------------------------------------------
# Iterative runs


def metric_values(root, name):
    path = next(Path(root).rglob("metrics.csv"))
    with open(path, newline="") as handle:
        return [float(row[name]) for row in csv.DictReader(handle) if row.get(name)]


@pytest.mark.parametrize("policy", ["current", "history"])
def test_iterative_run_with_a_centralized_local_comparator(tmp_path, policy):
    from lightning.pytorch.loggers import CSVLogger

    data = dict(CENTRAL, comparator_policy=policy, comparator_history_k=1 if policy == "history" else None,
                comparator_centralized_agent_index=1, comparator_centralized_adapter="tests.centralized_adapters.HalvesAdapter",
                num_iterations=2, num_train_epochs=1)
    module, datamodule, trainer = make_run(tmp_path, data=data, max_epochs=2, logger=CSVLogger(tmp_path))
    trainer.fit(module, datamodule)
    files = sorted((tmp_path / "preference_replay").glob("iteration_*.json"))
    assert [f.name for f in files] == ["iteration_0001.json", "iteration_0002.json"]
    assert all(json.loads(f.read_text())["num_pairs"] > 0 for f in files)
    unparseable = metric_values(tmp_path, "comparator/unparseable")
    assert len(unparseable) == 2 and all(0 < value < 16 * 4 for value in unparseable)


def test_a_round_where_nothing_parses_is_an_error_and_writes_no_round_file(tmp_path):
    data = dict(CENTRAL, comparator_policy="current", comparator_history_k=None,
                comparator_centralized_adapter="tests.centralized_adapters.NeverParses", num_iterations=1,
                num_train_epochs=1)
    module, datamodule, trainer = make_run(tmp_path, data=data, max_epochs=1)
    with pytest.raises(CentralizedComparatorParseError, match="none of this round's 64 completions could be split"):
        trainer.fit(module, datamodule)
    assert not list((tmp_path / "preference_replay").glob("iteration_*"))
