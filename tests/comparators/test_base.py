"""The comparator base class and its context: per-agent options and devices, the one-agent view,
binding, and sampling from the live team with the module's generator."""

from __future__ import annotations

import pytest

from comlrl_lightning import GenerationSettings, OptionError
from comlrl_lightning.comparators.base import Comparator, ComparatorContext
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team


def _context(team=None, devices=("cpu", "cpu", "cpu"), **more):
    return ComparatorContext(
        actors=lambda: team, generator=HFGenerator(), stream=RandomStream(0), agent_devices=list(devices), **more
    )


def test_a_context_sees_every_agent_unless_told_which():
    context = _context()
    assert (context.agent_indices, context.team_size) == ([0, 1, 2], 3)
    some = _context(devices=["cpu"], agent_indices=[2], team_size=3)
    assert (some.agent_indices, some.team_size) == ([2], 3)


def test_a_per_agent_option_is_one_value_for_all_or_one_per_agent_of_the_team():
    context = _context()
    assert context.per_agent([0.5], "temperature") == [0.5, 0.5, 0.5]
    assert context.per_agent([1, 2, 3], "temperature") == [1, 2, 3]
    with pytest.raises(OptionError, match=r"temperature length \(2\) must be 1 or 3\."):
        context.per_agent([1, 2], "temperature")
    # a view of agent 2 takes the team's third value, and still checks against the whole team's size
    view = context.view(2)
    assert view.per_agent([1, 2, 3], "temperature") == [3]
    with pytest.raises(OptionError, match=r"must be 1 or 3\."):
        view.per_agent([1, 2], "temperature")


def test_devices_default_to_the_agents_own_and_a_list_is_per_team_agent():
    context = _context(devices=["cpu", "meta", "cpu"])
    assert context.devices(None, "devices") == ["cpu", "meta", "cpu"]
    assert context.devices("auto", "devices") == ["cpu", "meta", "cpu"]
    assert context.devices("meta", "devices") == ["meta"] * 3
    assert context.devices(["a", "b", "c"], "devices") == ["a", "b", "c"]
    assert context.view(1).devices(None, "devices") == ["meta"]
    assert context.view(1).devices(["a", "b", "c"], "devices") == ["b"]


def test_a_view_is_a_one_agent_team_of_that_agent():
    team = Team(["embedded", "embedded"])
    view = _context(team, devices=["cpu", "cpu"]).view(1)
    seen = view.actors()
    assert seen.num_agents == 1 and seen.agents[0] is team.agents[1] and seen.tokenizers[0] is team.tokenizers[1]
    assert (view.agent_indices, view.team_size, view.agent_devices) == ([1], 2, ["cpu"])


class CheckingComparator(Comparator):
    def __init__(self, needs: int) -> None:
        super().__init__(num_candidates=2)
        self.needs, self.checked = needs, []

    def check_team(self, num_agents: int) -> None:
        self.checked.append(num_agents)
        if num_agents != self.needs:
            raise OptionError(f"comparator: needs {self.needs} agents, the team has {num_agents}.")


def test_binding_checks_the_team_size_and_an_unbound_comparator_says_who_binds_it():
    comparator = CheckingComparator(needs=3)
    with pytest.raises(RuntimeError, match="CheckingComparator is not bound: the data module binds it in setup"):
        comparator.source()
    with pytest.raises(OptionError, match="needs 3 agents, the team has 2"):
        comparator.bind(_context(devices=["cpu", "cpu"]))
    comparator.bind(_context())
    assert comparator.checked == [2, 3] and comparator.context.team_size == 3
    assert repr(comparator) == "CheckingComparator(num_candidates=2, needs=3, checked=[2, 3])"


def test_num_candidates_is_at_least_one_or_none():
    assert Comparator().num_candidates is None
    with pytest.raises(OptionError, match="num_candidates must be >= 1."):
        Comparator(num_candidates=0)


def test_the_base_comparator_samples_the_live_team_from_its_own_stream():
    team = Team(["embedded", "embedded"])
    settings = GenerationSettings(max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None)
    prompts = [["topic: abc\nwriter:", "topic: abc\nmatcher:"], ["topic: de\nwriter:", "topic: de\nmatcher:"]]

    def sampled(seed):
        comparator = Comparator()
        comparator.bind(ComparatorContext(lambda: team, HFGenerator(), RandomStream(seed), ["cpu", "cpu"]))
        assert comparator.source() is team
        return [
            [[c.text for c in per_item] for per_item in per_agent]
            for per_agent in comparator.sample([{}, {}], prompts, 3, settings)
        ]

    first = sampled(0)
    assert [len(per_agent) for per_agent in first] == [2, 2]  # completions[agent][item][j]
    assert all(len(per_item) == 3 for per_agent in first for per_item in per_agent)
    assert sampled(0) == first and sampled(1) != first  # drawn from the comparator's stream
    assert Comparator().snapshot_round(3) is None and Comparator().state_dict() == {}
