"""HFGenerator: a LoRA team samples every agent in the same ``generate()`` calls, the tokens of agent by agent."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from comlrl_lightning.generation.base import GenerationSettings, sample_team
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.team.lora import build_lora_agents
from comlrl_lightning.team.team import Team

SETTINGS = GenerationSettings(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None)
ITEMS = ["abc", "zz", "qwerty uiop", "k", "mnop"]


@pytest.fixture(scope="module")
def team():
    torch.manual_seed(0)
    agents = build_lora_agents("embedded", 3, LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn", "c_proj"]))
    with torch.no_grad():  # distinct adapters, so that each agent samples its own tokens
        for agent in agents:
            for parameter in agent.trainable_parameters():
                parameter.add_(0.3 * torch.randn_like(parameter))
    return Team(agents, tokenizers=load_tokenizer("embedded"))


def _prompts(items=ITEMS):
    return [[f"topic: {item}\nwriter:", f"topic: {item}\nmatcher:", f"topic: {item}\nwriter:"] for item in items]


def _ids(samples):
    return [[[c.ids for c in row] for row in agent] for agent in samples]


def _generate_calls(team, monkeypatch):
    calls = []
    shared = team.agents[0].shared
    original = shared.generate
    monkeypatch.setattr(shared, "generate", lambda **kw: calls.append(kw["input_ids"].shape[0]) or original(**kw))
    return calls


@pytest.mark.parametrize("batch_size, samples", [(None, 4), (12, 4), (None, 1)], ids=["auto", "split-calls", "single"])
def test_a_lora_team_samples_in_one_pass_what_its_agents_sample_one_by_one(team, monkeypatch, batch_size, samples):
    calls = _generate_calls(team, monkeypatch)
    generator = HFGenerator(batch_size=batch_size)
    team.one_pass = True
    one_pass = sample_team(generator, team, _prompts(), samples, SETTINGS, RandomStream(5))
    one_pass_calls = list(calls)
    calls.clear()
    team.one_pass = False
    try:
        per_agent = sample_team(generator, team, _prompts(), samples, SETTINGS, RandomStream(5))
    finally:
        team.one_pass = True
    assert _ids(one_pass) == _ids(per_agent)
    rows = 3 * len(ITEMS) * samples
    if batch_size is None:
        assert one_pass_calls == [rows] and calls == [rows // 3] * 3  # one call for every agent, not one each
    else:  # 3 prompts (12 sequences) per call, the calls crossing from one agent to the next
        assert one_pass_calls == [12] * 5 and sum(calls) == rows
    assert _ids(one_pass)[0] != _ids(one_pass)[2]  # the same prompts, each agent's own seeds and adapter


def test_the_rows_go_through_their_own_agents_adapter(team):
    """Agents 0 and 2 get the same prompts: with the same seeds they sample alike only through the same adapter."""
    prompts = _prompts()
    generator = HFGenerator()
    seeds = list(range(100, 100 + len(ITEMS)))
    encoded = team.encode_prompts(0, [p[0] for p in prompts])
    own = generator.sample(team, [0] * len(ITEMS) + [2] * len(ITEMS), encoded * 2, seeds * 2, 2, SETTINGS)
    alone = [generator.sample(team, [agent] * len(ITEMS), encoded, seeds, 2, SETTINGS) for agent in (0, 2)]
    ids = [[c.ids for c in row] for row in own]
    assert ids[: len(ITEMS)] == [[c.ids for c in row] for row in alone[0]]
    assert ids[len(ITEMS) :] == [[c.ids for c in row] for row in alone[1]]
    assert ids[: len(ITEMS)] != ids[len(ITEMS) :]


def test_a_team_of_full_models_samples_agent_by_agent(monkeypatch):
    team = Team(["embedded", "embedded"])
    assert team.one_pass_adapters() is None
    calls = []
    for agent in team.agents:
        original = agent.generate
        monkeypatch.setattr(agent, "generate", lambda original=original, **kw: calls.append(1) or original(**kw))
    sample_team(HFGenerator(), team, [p[:2] for p in _prompts()], 2, SETTINGS, RandomStream(1))
    assert len(calls) == 2


def test_beam_search_samples_each_requests_candidates_from_its_own_seed():
    """``num_beams`` > 1 is generate()'s beam sampling: K candidates per prompt (not K copies of one
    beam), the same tokens for a request alone or beside others, and the global generator untouched."""
    team = Team(["embedded"])
    settings = GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None, extra={"num_beams": 2})
    generator = HFGenerator()
    prompts = [f"topic: {item}\nwriter:" for item in ITEMS]
    before = torch.random.get_rng_state()
    together = generator.generate(team, 0, prompts, 3, settings, RandomStream(7))
    assert torch.equal(torch.random.get_rng_state(), before)
    assert [len(row) for row in together] == [3] * len(ITEMS)
    assert all(len(c.ids) <= 6 for row in together for c in row)
    assert any(len({tuple(c.ids) for c in row}) > 1 for row in together)  # sampled, not one beam copied
    seeds = RandomStream(7)
    alone = [generator.generate(team, 0, [prompt], 3, settings, seeds)[0] for prompt in prompts]  # same seed order
    assert [[c.ids for c in row] for row in alone] == [[c.ids for c in row] for row in together]
    other = generator.generate(team, 0, prompts, 3, settings, RandomStream(8))
    assert [[c.ids for c in row] for row in other] != [[c.ids for c in row] for row in together]


def test_the_generation_budget_is_a_share_of_what_the_training_state_leaves():
    from comlrl_lightning.generation.hf import batch_size_for_budget, generation_memory_budget

    gib = 2**30
    # 24 GiB total, 4.3 GiB of weights, gradients and AdamW moments: a quarter of 19.7 GiB
    assert generation_memory_budget(24 * gib, int(4.3 * gib)) == int(0.25 * 19.7 * gib)
    assert generation_memory_budget(8 * gib, 2 * gib, share=0.5) == 3 * gib
    assert generation_memory_budget(4 * gib, 5 * gib) == 0  # never negative
    # 40 MiB sequences in a 1 GiB budget: 25 of them (25.6 round down); at least one always
    assert batch_size_for_budget(40 * 2**20, gib) == 25
    assert batch_size_for_budget(40 * 2**20, 0) == 1 and batch_size_for_budget(0, gib) == gib


def test_the_training_state_counts_a_shared_base_once_and_trainable_parameters_four_times(team):
    from comlrl_lightning.generation.hf import training_state_bytes

    base = team.agents[0].shared
    frozen = sum(p.numel() * 4 for p in base.parameters() if not p.requires_grad)
    trainable = sum(p.numel() * 4 for p in base.parameters() if p.requires_grad)
    assert frozen > 0 and trainable > 0
    # three adapters' views of one base: each parameter once; the adapters' weight, gradient and 2 moments
    assert training_state_bytes(team.agents) == frozen + 4 * trainable
    linear = torch.nn.Linear(3, 2)  # 8 float32 parameters
    assert training_state_bytes([linear, linear]) == 8 * 4 * 4
    assert training_state_bytes([linear.requires_grad_(False)]) == 8 * 4


def test_the_automatic_batch_size_keeps_to_the_memory_budget(team, monkeypatch):
    from comlrl_lightning.generation import hf
    from comlrl_lightning.generation.hf import sequence_bytes, training_state_bytes

    per_sequence = sequence_bytes(team.agents[0], 20)
    monkeypatch.setattr(hf, "device_memory", lambda device: 2**30)
    free = 2**30 - training_state_bytes(team.agents)
    assert HFGenerator().auto_batch_size(team, 0, 20) == int(0.25 * free) // per_sequence
    pinned = HFGenerator(memory_budget_gib=per_sequence * 7.5 / 2**30)  # a budget of 7.5 sequences
    assert pinned.auto_batch_size(team, 0, 20) == 7
    with pytest.raises(ValueError, match=r"memory_budget_gib must be > 0 GiB \(got 0\)"):
        HFGenerator(memory_budget_gib=0)


def test_a_prompt_past_the_context_is_a_data_error_naming_it_not_an_index_error_in_generate(team):
    from comlrl_lightning.errors import DataError

    prompts = [["short", "x " * 600, "short"]]  # agent 1's prompt is past GPT-2's 512 positions
    with pytest.raises(
        DataError, match=r"prompt 1 of this call: agent 1's prompt has \d+ tokens; with max_new_tokens=8"
    ):
        sample_team(HFGenerator(), team, prompts, 1, SETTINGS, RandomStream(0))


@pytest.mark.parametrize("agent", [0, 1])
def test_a_sharded_rank_with_no_prompts_keeps_the_others_company_with_the_agent_they_sample(monkeypatch, agent):
    """A rank whose share of a batch is empty still makes the other ranks' calls (a sharded forward is a
    collective), with the same agent's model: another agent's would gather other weights into their forward."""
    import comlrl_lightning.generation.hf as hf

    team = Team(["embedded", "embedded"])
    team._synced = True  # as Team.shard leaves it; the collective that counts the calls answers "one call"
    monkeypatch.setattr(hf, "max_over_ranks", lambda calls, device: max(calls, 1))
    callers = []

    def generate(caller, synced, input_ids, attention_mask, num_samples, sampling, beam_seed):
        callers.append(caller)
        return torch.cat([input_ids, input_ids[:, -1:]], dim=1).repeat_interleave(num_samples, dim=0)

    monkeypatch.setattr(HFGenerator, "_generate", staticmethod(generate))
    assert HFGenerator().generate(team, agent, [], 2, SETTINGS, RandomStream(0)) == []
    assert callers == [team.agents[agent]]
