"""Centralized comparator generation: custom adapters, sources, and runs (the tagged protocol itself:
tests/tasks/test_centralized_task.py)."""

from __future__ import annotations

import csv
import json
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from comlrl_lightning import (
    ApiComparator,
    CentralizedComparator,
    CurrentComparator,
    CurrentCopyComparator,
    GenerationSettings,
    HistoryComparator,
    IterativePreferenceDataModule,
    ModelComparator,
    OptionError,
    Team,
)
from comlrl_lightning.comparators import ComparatorContext
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.rounds.snapshots import PolicySnapshots
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.centralized_task import (
    AdapterError,
    CentralizedAdapter,
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
    resolve_adapter,
)
from tests.helpers.centralized_adapters import EchoAdapter, HalvesAdapter
from tests.helpers.fake_providers import FakeProvider
from tests.helpers.iterative_run import make_run

ITEMS = [{"prompt": "sun"}, {"prompt": "moon"}]
PROMPTS = [["topic: sun\nwriter:", "topic: sun\nmatcher:"], ["topic: moon\nwriter:", "topic: moon\nmatcher:"]]
JOINT = [f"topic: {item['prompt']}\nboth:" for item in ITEMS]  # HalvesAdapter's and EchoAdapter's joint prompts
SETTINGS = GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None)


@pytest.fixture(scope="module")
def team():
    """Two agents that differ: agent 1's final layer-norm bias is perturbed, so the slot matters."""
    team = Team(["embedded", "embedded"])
    with torch.no_grad():
        bias = team.agents[1].transformer.ln_f.bias
        bias.add_(2.0 * torch.randn(bias.shape, generator=torch.Generator().manual_seed(0)))
    return team


def context(team, seed=5, devices=None, snapshots=None):
    """What the data module hands a comparator in setup (here: the fixture team on the CPU)."""
    return ComparatorContext(
        actors=lambda: team,
        generator=HFGenerator(),
        stream=RandomStream(seed),
        agent_devices=devices or ["cpu"] * team.num_agents,
        snapshots=snapshots,
    )


def build(team, source=None, slot=1, adapter=None, seed=5, **context_options):
    comparator = CentralizedComparator(source=source, adapter=adapter or HalvesAdapter(), agent_index=slot)
    comparator.bind(context(team, seed, **context_options))
    comparator.start_round(0)
    return comparator


def texts(per_agent):
    return [[c.text for c in per_item] for per_item in per_agent]


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# ----------------------------------------------------------------------------------------------
# Adapters and the comparator's own options


def test_adapter_by_import_path_class_factory_or_object():
    assert isinstance(resolve_adapter(None), TaggedCentralizedComparatorAdapter)
    for path in [
        "tests.helpers.centralized_adapters.HalvesAdapter",
        "tests.helpers.centralized_adapters.make_halves",
        "tests.helpers.centralized_adapters.INSTANCE",
    ]:
        assert isinstance(resolve_adapter(path), HalvesAdapter)
        assert isinstance(CentralizedComparator(adapter=path).adapter, HalvesAdapter)
    instance = HalvesAdapter()
    assert CentralizedComparator(adapter=instance).adapter is instance
    default = CentralizedComparator()
    assert isinstance(default.adapter, TaggedCentralizedComparatorAdapter)
    assert isinstance(default.source_comparator, CurrentComparator) and default.agent_index == 0
    comparator = CentralizedComparator(
        source=HistoryComparator(k=1), adapter="tests.helpers.centralized_adapters.HalvesAdapter", agent_index=1
    )
    data = IterativePreferenceDataModule(comparator=comparator)
    assert data.comparator is comparator and isinstance(data.comparator.adapter, HalvesAdapter)


def test_adapter_subclassing_the_base_class(team):
    assert isinstance(resolve_adapter("tests.helpers.centralized_adapters.EchoAdapter"), CentralizedAdapter)
    for adapter in [EchoAdapter(), "tests.helpers.centralized_adapters.EchoAdapter"]:
        comparator = build(team, adapter=adapter)
        assert isinstance(comparator.adapter, EchoAdapter)
        result = comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)
        joint = texts(HFGenerator().generate(team, 1, JOINT, 3, SETTINGS, RandomStream(5)))
        assert texts(result[0]) == texts(result[1]) == joint
        assert comparator.metrics()["comparator/unparseable"] == 0.0
    # the base class's methods are callable, so it resolves, but it does not implement the protocol
    comparator = build(team, adapter=CentralizedAdapter())
    with pytest.raises(NotImplementedError):
        comparator.sample(ITEMS, PROMPTS, 1, SETTINGS)


class OnlyParser:
    def parse_completion(self, completion, batch_item, num_agents):
        return [completion] * num_agents


CENTRAL_RULES = [
    (dict(adapter="tests.helpers.centralized_adapters.NoParser"), "adapter.parse_completion must be callable."),
    (dict(adapter=OnlyParser()), "adapter.build_prompt must be callable."),
    (dict(adapter="tests.no_such_module.Adapter"), "adapter: cannot import 'tests.no_such_module.Adapter'"),
    (dict(adapter="tests.helpers.centralized_adapters.NoSuchAdapter"), "adapter: cannot import"),
    (dict(agent_index=-1), "agent_index must be >= 0."),
    (dict(source=CentralizedComparator()), "source must not itself be centralized."),
]


@pytest.mark.parametrize("options, message", CENTRAL_RULES)
def test_centralized_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        CentralizedComparator(**options)
    assert message in str(error.value)


def test_adapter_errors_are_type_errors_too():
    with pytest.raises(TypeError, match="adapter.parse_completion must be callable."):
        resolve_adapter("tests.helpers.centralized_adapters.NoParser")
    with pytest.raises(TypeError, match="adapter.parse_completion must be callable."):
        CentralizedComparator(adapter="tests.helpers.centralized_adapters.NoParser")
    assert issubclass(AdapterError, OptionError)


def test_rules_checked_against_the_team_at_bind(team):
    comparator = CentralizedComparator(agent_index=2)
    with pytest.raises(OptionError, match=r"agent_index \(2\) must be smaller than num_agents \(2\)."):
        comparator.bind(context(team))
    # a per-agent option of a local source is given for the whole team and picked for the slot
    comparator = CentralizedComparator(source=ModelComparator(agents=["a", "b", "c"]), agent_index=1)
    with pytest.raises(OptionError, match=r"agents length \(3\) must be 1 or 2."):
        comparator.bind(context(team))
    comparator = CentralizedComparator(source=ModelComparator(model_name="m", devices=["cpu", "cpu", "cpu"]))
    with pytest.raises(OptionError, match=r"devices length \(3\) must be 1 or 2."):
        comparator.bind(context(team))


def test_the_number_of_candidates_is_the_sources():
    assert CentralizedComparator().num_candidates is None
    assert CentralizedComparator(source=HistoryComparator(k=1, num_candidates=3)).num_candidates == 3
    assert CentralizedComparator(source=CurrentCopyComparator(num_candidates=2)).num_candidates == 2


# ----------------------------------------------------------------------------------------------
# Sources


def test_local_source_is_slot_model_with_the_comparator_stream(team):
    comparator = build(team, slot=1)
    source = comparator.source_comparator.source()
    assert source.num_agents == 1 and source.agents[0] is team.agents[1]
    assert source.tokenizers[0] is team.tokenizers[1]
    result = comparator.sample(ITEMS, PROMPTS, 4, SETTINGS)
    direct = HFGenerator().generate(team, 1, JOINT, 4, SETTINGS, RandomStream(5))  # agent 1, same seed: the same draws
    other = HFGenerator().generate(team, 0, JOINT, 4, SETTINGS, RandomStream(5))
    assert texts(direct) != texts(other)
    dropped = 0
    for k, per_item in enumerate(direct):
        parsed = [c.text for c in per_item if sum(map(ord, c.text)) % 2 == 0]
        dropped += len(per_item) - len(parsed)
        for agent in range(2):
            roles = [HalvesAdapter().parse_completion(t, ITEMS[k], 2)[agent] for t in parsed]
            assert [c.text for c in result[agent][k]] == roles
            assert [c.ids for c in result[agent][k]] == [
                team.tokenizers[agent](r, add_special_tokens=False)["input_ids"] for r in roles
            ]
    assert 0 < dropped < 8, "the seed should give both kinds of completion"
    assert comparator.metrics()["comparator/unparseable"] == float(dropped)
    assert comparator.metrics()["comparator/empty_sections"] == float(
        sum(1 for per_agent in result for per_item in per_agent for c in per_item if not c.text.strip())
    )
    # slot 0 samples with agent 0's model instead
    assert texts(build(team, slot=0, adapter=EchoAdapter()).sample(ITEMS, PROMPTS, 4, SETTINGS)[0]) == texts(other)


def test_local_sources_see_the_slots_device():
    # devices only named, never used: the source's context is the slot's view of the team
    team = Team(["embedded", "embedded"])
    devices = ["cuda:7", "cpu"]
    for slot in range(2):
        comparator = CentralizedComparator(source=ModelComparator(model_name="embedded"), agent_index=slot)
        comparator.bind(context(team, devices=devices))
        view = comparator.source_comparator.context
        assert view.agent_devices == [devices[slot]] and view.agent_indices == [slot] and view.team_size == 2
        assert comparator.source_comparator._devices == [devices[slot]]
        assert comparator.source_comparator.stream is comparator.stream
        per_agent = CentralizedComparator(
            source=ModelComparator(model_name="m", devices=["meta", "cuda:3"]), agent_index=slot
        )
        per_agent.bind(context(team, devices=devices))
        assert per_agent.source_comparator._devices == [["meta", "cuda:3"][slot]]


def test_current_copy_source_copies_only_the_slot_model(team):
    reference = build(team, adapter=EchoAdapter()).sample(ITEMS, PROMPTS, 2, SETTINGS)
    # "cpu:0" is not the agents' "cpu" device, so a copy is made (on the CPU)
    comparator = build(team, source=CurrentCopyComparator(devices="cpu:0"), adapter=EchoAdapter())
    source = comparator.source_comparator.source()
    assert source.num_agents == 1 and source.agents[0] is not team.agents[1]
    assert same_weights(source.agents[0], team.agents[1]) and not same_weights(source.agents[0], team.agents[0])
    assert not any(p.requires_grad for p in source.agents[0].parameters())
    assert texts(comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)[1]) == texts(reference[1])
    comparator.end_round()
    assert comparator.source_comparator.source().agents[0] is team.agents[1]
    # on the agents' own devices no copy is made
    same = build(team, source=CurrentCopyComparator(devices=["cpu", "cpu"]))
    assert same.source_comparator.source().agents[0] is team.agents[1]


def test_model_policy_loads_one_model_for_the_slot(team):
    comparator = build(team, source=ModelComparator(model_name="embedded"))
    assert comparator.source_comparator.source().num_agents == 1
    result = comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)
    assert len(result) == 2 and all(len(a[k]) == len(result[0][k]) for a in result for k in range(2))
    assert all(len(result[0][k]) <= 2 for k in range(2))
    # one model per agent: the slot's is loaded
    comparator = build(team, source=ModelComparator(agents=["no/such-model-for-slot-0", "embedded"]), slot=1)
    assert comparator.source_comparator.source().num_agents == 1


def test_history_source_loads_the_slots_snapshot(team, tmp_path):
    snapshots = PolicySnapshots(tmp_path)
    snapshots.save(0, team)
    comparator = build(team, source=HistoryComparator(k=1), adapter=EchoAdapter(), snapshots=snapshots)
    assert comparator.snapshot_round(0) == 0 and comparator.snapshot_round(3) == 2
    source = comparator.source_comparator.source()
    assert source.num_agents == 1 and source.agents[0] is not team.agents[1]
    assert same_weights(source.agents[0], team.agents[1]) and not same_weights(source.agents[0], team.agents[0])
    result = comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)
    assert texts(result[0]) == texts(HFGenerator().generate(team, 1, JOINT, 3, SETTINGS, RandomStream(5)))


def tagged_or_not(prompt, j):
    return ["<agent_0> hello </agent_0>\n<AGENT_1>world</agent_1>", "no tags here", "<agent_1>only one</agent_1>"][j]


def test_api_source_one_call_per_item_with_the_slot_and_drops_unparseable(team):
    with FakeProvider("generic", text=tagged_or_not) as provider:
        comparator = build(
            team, source=ApiComparator(url=provider.url), slot=1, adapter=TaggedCentralizedComparatorAdapter()
        )
        result = comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)
    tagged = TaggedCentralizedComparatorAdapter()
    assert sorted((b["prompt"], b["agent_idx"], b["num_return_sequences"]) for b in provider.bodies()) == sorted(
        (tagged.build_prompt(item, prompts), 1, 3) for item, prompts in zip(ITEMS, PROMPTS)
    )
    assert texts(result[0]) == [["hello", ""]] * 2
    # a role longer than max_new_tokens (6 here) is cut to the budget on arrival, and counted
    assert texts(result[1]) == [["world", "only o"]] * 2
    assert comparator.metrics() == {
        "comparator/api_shortfall": 0.0,
        "comparator/api_requests": 2.0,
        "comparator/api_retries": 0.0,
        "comparator/api_truncated": 0.0,
        "comparator/unparseable": 2.0,
        "comparator/empty_sections": 2.0,
        "comparator/truncated_roles": 2.0,
    }
    with FakeProvider("generic", text=lambda prompt, j: "never tagged") as provider:
        comparator = build(team, source=ApiComparator(url=provider.url), adapter=TaggedCentralizedComparatorAdapter())
        with pytest.raises(CentralizedComparatorParseError, match="none of this round's 6 completions"):
            comparator.sample(ITEMS, PROMPTS, 3, SETTINGS)


@pytest.mark.parametrize(
    "adapter, error, message",
    [
        ("WrongCount", ValueError, "must return exactly 2 outputs; got 1."),
        ("NotASequence", TypeError, "must return a sequence of strings, not str."),
    ],
)
def test_parser_output_contract(team, adapter, error, message):
    comparator = build(team, adapter=f"tests.helpers.centralized_adapters.{adapter}")
    with pytest.raises(error, match=message):
        comparator.sample(ITEMS, PROMPTS, 2, SETTINGS)


# ----------------------------------------------------------------------------------------------
# Iterative runs


def metric_values(root, name):
    path = next(Path(root).rglob("metrics.csv"))
    with open(path, newline="") as handle:
        return [float(row[name]) for row in csv.DictReader(handle) if row.get(name)]


def run_centralized(root, source, rounds=2):
    """``rounds`` rounds with ``source`` writing joint completions at slot 1, split by HalvesAdapter."""
    from lightning.pytorch.loggers import CSVLogger

    comparator = CentralizedComparator(
        source=source, adapter="tests.helpers.centralized_adapters.HalvesAdapter", agent_index=1
    )
    data = dict(comparator=comparator, num_iterations=rounds, num_train_epochs=1)
    module, datamodule, trainer = make_run(root, data=data, max_epochs=rounds, logger=CSVLogger(root))
    trainer.fit(module, datamodule)
    files = sorted((root / "preference_replay").glob("iteration_*.json"))
    assert [f.name for f in files] == [f"iteration_{r:04d}.json" for r in range(1, rounds + 1)]
    assert all(json.loads(f.read_text())["num_pairs"] > 0 for f in files)
    unparseable = metric_values(root, "comparator/unparseable")
    assert len(unparseable) == rounds and all(0 < value < 16 * 4 for value in unparseable)
    return module, datamodule


SOURCES = {
    "current": lambda url: CurrentComparator(),
    "current_copy": lambda url: CurrentCopyComparator(devices="cpu:0"),
    "model": lambda url: ModelComparator(model_name="embedded"),
    "api": lambda url: ApiComparator(url=url),
}


@pytest.mark.parametrize("policy", list(SOURCES))
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_iterative_run_with_a_centralized_comparator(tmp_path, policy):
    with FakeProvider("generic") if policy == "api" else nullcontext() as provider:
        _, datamodule = run_centralized(tmp_path, SOURCES[policy](provider.url if provider else None))
    assert datamodule.snapshots is None and not (tmp_path / "policy_snapshots").exists()
    if policy == "api":
        assert {b["agent_idx"] for b in provider.bodies()} == {1} and len(provider.bodies()) == 2 * 16


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_centralized_history_comparator_gets_snapshots_from_the_data_module(tmp_path):
    source = HistoryComparator(k=1)
    comparator = CentralizedComparator(source=source, agent_index=1)
    for round_index in range(4):  # snapshot_round delegates to the source
        assert comparator.snapshot_round(round_index) == source.snapshot_round(round_index) == max(round_index - 1, 0)
    assert CentralizedComparator(source=HistoryComparator(k=2)).snapshot_round(5) == 3
    assert CentralizedComparator(source=CurrentComparator()).snapshot_round(1) is None

    module, datamodule = run_centralized(tmp_path, HistoryComparator(k=1), rounds=3)
    history = datamodule.comparator.source_comparator
    assert datamodule.snapshots is not None
    assert datamodule.snapshots.directory == (tmp_path / "policy_snapshots").absolute()
    # saved at every round start; "initial" pruned once no later round (or resume) needs it
    assert datamodule.snapshots.saved == ["iteration_0000", "iteration_0001"]
    assert sorted(p.name for p in (tmp_path / "policy_snapshots").iterdir()) == [
        ".lock",
        "iteration_0000",
        "iteration_0001",
    ]
    # the snapshot left memory after the last round's collection; reloaded, round 3 compared against
    # the policy at the start of round 2, agent 1 only, on agent 1's device
    assert history._team is None and history._loaded is None
    history.start_round(2)
    assert history._loaded == 1 and history.source().num_agents == 1
    saved = Team([str(tmp_path / "policy_snapshots" / "iteration_0000" / f"agent_{i}") for i in range(2)])
    assert same_weights(history.source().agents[0], saved.agents[1])
    assert not same_weights(saved.agents[0], saved.agents[1])
    assert history.source().device_of(0) == module.team.device_of(1)


def test_a_round_where_nothing_parses_is_an_error_and_writes_no_round_file(tmp_path):
    comparator = CentralizedComparator(
        source=CurrentComparator(), adapter="tests.helpers.centralized_adapters.NeverParses"
    )
    data = dict(comparator=comparator, num_iterations=1, num_train_epochs=1)
    module, datamodule, trainer = make_run(tmp_path, data=data, max_epochs=1)
    with pytest.raises(CentralizedComparatorParseError, match="none of this round's 64 completions could be split"):
        trainer.fit(module, datamodule)
    assert not list((tmp_path / "preference_replay").glob("iteration_*"))
