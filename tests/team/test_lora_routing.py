"""One pass for a LoRA team: every agent's rows in one forward of the shared base, each through its
own adapter, with the values and gradients of one forward per agent."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.team import activation_checkpointing as checkpointing
from comlrl_lightning.team import lora_routing, packed_scoring
from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.team.lora import build_lora_agents
from comlrl_lightning.team.lora_routing import MixedAdapters, Routing, supports_mixed_adapters
from comlrl_lightning.team.team import Team, pack_sequences, stack_batches

AGENTS = 3


def _team(agents=AGENTS, fused_head=None, **lora) -> Team:
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn", "c_proj"], **lora)
    agents = build_lora_agents("embedded", agents, config)
    team = Team(agents, tokenizers=load_tokenizer("embedded"), fused_head=fused_head).train()
    with torch.no_grad():  # distinct adapters, B away from its zero start
        for agent in team.agents:
            for parameter in agent.trainable_parameters():
                parameter.add_(0.2 * torch.randn_like(parameter))
    return team


def _batches(team: Team) -> list:
    """Every agent's batch of four rows over the same three prompts (shared only within an agent)."""
    prompts = [[3, 4, 5, 6], [3, 9, 11], [7, 8]]
    batches = []
    for agent in range(team.num_agents):
        rows = [prompts[(k + (agent == 2)) % 3] for k in range(4)]
        completions = [[6 + agent, 7, 8, 9][: 1 + (k + agent) % 4] for k in range(4)]
        batches.append(pack_sequences(rows, completions, [len(c) for c in completions], 0))
    return batches


def _scores_and_gradients(team: Team, batches: list, one_pass: bool):
    team.one_pass = one_pass
    team.zero_grad(set_to_none=True)
    logprobs = team.score(batches)
    sum(
        ((lp * b["score_mask"]).sum(dim=-1) * (i + 1)).sum() for i, (lp, b) in enumerate(zip(logprobs, batches))
    ).backward()
    gradients = {name: p.grad.clone() for name, p in team.named_parameters() if p.grad is not None}
    return [lp.detach() for lp in logprobs], gradients


@pytest.mark.parametrize(
    "packed, fused, checkpointed",
    [(True, None, False), (False, None, False), (True, False, False), (True, None, True)],
    ids=["packed-fused-head", "padded", "packed-logits", "packed-checkpointed"],
)
def test_one_pass_equals_one_forward_per_agent_in_values_and_gradients(monkeypatch, packed, fused, checkpointed):
    team = _team(fused_head=fused)
    if not packed:
        monkeypatch.setattr(packed_scoring, "packed_token_logprobs", lambda *args, **kwargs: None)
    if checkpointed:
        checkpointing.enable_activation_checkpointing(team.agents[0])
    batches = _batches(team)
    calls = []
    handle = team.agents[0].get_base_model().register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        one, one_gradients = _scores_and_gradients(team, batches, one_pass=True)
        assert len(calls) == 1  # every agent's rows in one forward of the base
        calls.clear()
        per_agent, gradients = _scores_and_gradients(team, batches, one_pass=False)
        assert len(calls) == AGENTS
    finally:
        handle.remove()
    for ours, expected in zip(one, per_agent):
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    assert one_gradients.keys() == gradients.keys()
    assert {name.split(".lora_")[1].split(".")[1] for name in gradients} == {f"agent_{i}" for i in range(AGENTS)}
    for name, expected in gradients.items():
        # float32 sums in another order: the noise scales with the gradient's largest entry
        scale = float(expected.abs().max().clamp(min=1.0))
        torch.testing.assert_close(one_gradients[name], expected, rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_identical_prompts_of_different_agents_are_not_shared_in_the_packed_layout():
    team = _team()
    stacked, groups = stack_batches(_batches(team), 0)
    layout = lambda groups: packed_scoring.build_layout(  # noqa: E731
        stacked["input_ids"], stacked["attention_mask"], stacked["score_mask"], groups
    )
    prompt_tokens = lambda layout: int(layout.groups[0].slots.numel())  # noqa: E731 - the distinct prompts' tokens
    shared, separate = layout(None), layout(groups)
    assert prompt_tokens(shared) == 4 + 3 + 2  # three distinct prompts over all rows
    assert prompt_tokens(separate) == AGENTS * (4 + 3 + 2)  # each agent's three prompts, once per agent
    assert separate.token_groups.shape == separate.input_ids.shape[1:]
    # the packed tokens come agent by agent: a few consecutive runs, not one per token
    assert len(Routing([f"agent_{i}" for i in range(AGENTS)], separate.token_groups).runs) == 2 * AGENTS


def test_rows_without_an_agent_go_through_the_base_alone():
    team = _team(agents=2)
    base, agent = team.agents[0].base_model_view(), team.agents[1]
    batch = pack_sequences([[3, 4, 5], [3, 4, 5]], [[6, 7], [6, 7]], [2, 2], 0)
    mixed = MixedAdapters(agent.shared, ["agent_0", "agent_1"], torch.tensor([-1, 1]))
    with torch.no_grad():
        logits = mixed(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        expected = [
            model(input_ids=batch["input_ids"][:1], attention_mask=batch["attention_mask"][:1]).logits[0]
            for model in (base, agent)
        ]
    torch.testing.assert_close(logits[0], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[1], expected[1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits[0], logits[1])


def test_a_layer_that_sees_part_of_the_tokens_cannot_be_routed():
    routing = Routing(["a", "b"], torch.tensor([0, 0, 1]))
    routing.tokens = 12
    assert routing.slices(12) == [("a", 0, 8), ("b", 8, 12)]  # 4 tokens per unit
    with pytest.raises(ConfigurationError, match="team.lora_one_pass: false"):
        routing.slices(6)  # e.g. an expert of a mixture, or a head after logits_to_keep


def _peft_team(**config) -> Team:
    """Two LoRA agents on one peft model built from a ``LoraConfig`` of these options."""
    from peft import LoraConfig, get_peft_model

    from comlrl_lightning.team.loading import load_model
    from comlrl_lightning.team.lora import LoraAgent

    config = LoraConfig(**{"r": 4, "target_modules": ["c_attn"], **config})
    shared = get_peft_model(load_model("embedded"), config, adapter_name="agent_0")
    shared.add_adapter("agent_1", config)
    return Team([LoraAgent(shared, f"agent_{i}") for i in range(2)], tokenizers=load_tokenizer("embedded"))


@pytest.mark.parametrize(
    "config, routable",
    [
        (dict(), True),
        (dict(use_dora=True), False),  # DoRA rescales by the adapted weight's norm: not a per-row sum
        (dict(target_modules=["c_attn", "lm_head"]), False),  # the head sees only the scored positions
        (dict(modules_to_save=["ln_f"]), False),  # a trained copy per adapter, chosen by the active one
    ],
    ids=["lora", "dora", "lm-head", "modules-to-save"],
)
def test_adapters_that_cannot_be_routed_run_agent_by_agent(config, routable):
    team = _peft_team(**config)
    assert supports_mixed_adapters(team.agents[0].shared) is routable
    assert (team.one_pass_adapters() is not None) is routable
    calls = []
    handle = team.agents[0].get_base_model().register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        team.score(_batches(team), unit="sequence")
    finally:
        handle.remove()
    assert len(calls) == (1 if routable else 2)
    team.one_pass = False  # the option
    assert team.one_pass_adapters() is None


def test_routing_leaves_the_layers_as_it_found_them():
    team = _team(agents=2)
    shared = team.agents[0].shared
    layers = lora_routing.lora_layers(shared)
    with lora_routing.routed(shared, Routing(["agent_0", "agent_1"], torch.tensor([0, 1]))):
        assert all("forward" in vars(layer) for layer in layers)
    assert not any("forward" in vars(layer) for layer in layers)
