"""A team's scoring plan is decided when it is built; packed scoring falls back narrowly, saying why once."""

from __future__ import annotations

import logging

import pytest
import torch
from peft import LoraConfig
from torch import nn

from comlrl_lightning.defaults import build_char_tokenizer
from comlrl_lightning.team import packed_scoring, scoring_plan
from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.team.lora import build_lora_agents
from comlrl_lightning.team.scoring_plan import FULL_MODELS, LORA_ONE_PASS, LORA_PER_AGENT, SamplingPlan
from comlrl_lightning.team.team import Team, pack_sequences

LOG = "comlrl_lightning.team.packed_scoring"


def _lora_team(one_pass: bool = True) -> Team:
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn", "c_proj"])
    return Team(build_lora_agents("embedded", 2, config), tokenizers=load_tokenizer("embedded"), one_pass=one_pass)


def _batches(agents: int) -> list:
    return [pack_sequences([[3, 4, 5], [7, 8]], [[6, 7], [9]], [2, 1], 0) for _ in range(agents)]


def test_the_plan_is_made_when_the_team_is_built():
    full = Team(["embedded", "embedded"])
    assert full.plan.kind == FULL_MODELS and not full.is_lora and full.one_pass_adapters() is None
    lora = _lora_team()
    assert lora.plan.kind == LORA_ONE_PASS and lora.is_lora
    assert lora.plan.adapters == ("agent_0", "agent_1") and lora.one_pass_adapters() == ["agent_0", "agent_1"]
    assert _lora_team(one_pass=False).plan.kind == LORA_PER_AGENT
    assert str(Team(["embedded"], fused_head=False).plan) == f"{FULL_MODELS}, materialised logits"
    assert full.plan.padded == (None, None) and lora.plan.padded == (None, None)  # both scored packed


def test_scoring_reads_the_plan_instead_of_asking_on_every_call(monkeypatch):
    team = _lora_team()

    def asked(*_args):
        raise AssertionError("the routing support was asked again after the team was built")

    monkeypatch.setattr(scoring_plan, "supports_mixed_adapters", asked)
    logprobs = team.score(_batches(2))
    assert [tuple(lp.shape) for lp in logprobs] == [(2, 2), (2, 2)]
    assert team.one_pass_adapters() == ["agent_0", "agent_1"]
    with pytest.raises(AssertionError, match="asked again"):
        team.one_pass = True  # the switch makes the plan again


def test_the_one_pass_switch_and_sharding_make_the_plan_again():
    team = _lora_team()
    team.one_pass = False
    assert team.plan.kind == LORA_PER_AGENT and team.one_pass_adapters() is None
    team.one_pass = True
    assert team.plan.one_pass
    synced = Team(["embedded"], synced=True)
    assert synced.plan.fused_head is False and synced.fused_head_of(synced.agents[0]) is None


def test_one_pass_and_agent_by_agent_score_alike():
    team = _lora_team()
    with torch.no_grad():
        for parameter in team.agents[1].trainable_parameters():
            parameter.add_(0.1)
    one_pass = team.score(_batches(2), unit="sequence")
    team.one_pass = False
    per_agent = team.score(_batches(2), unit="sequence")
    for a, b in zip(one_pass, per_agent):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_the_sampling_plan_holds_every_agents_prompts_and_the_routing():
    team = _lora_team()
    plan = team.sampling_plan([["ab", "c"], ["de"]])
    assert plan.one_pass and plan.agents == [0, 0, 1]
    assert plan.prompts == team.encode_prompts(0, ["ab", "c"]) + team.encode_prompts(1, ["de"])
    assert plan.per_agent(["x", "y", "z"]) == [["x", "y"], ["z"]]
    assert plan.route(torch.tensor([0, 1])).adapters == ["agent_0", "agent_1"]
    assert not Team(["embedded"]).sampling_plan([["ab"]]).one_pass
    assert SamplingPlan([[[1]]]).agents == [0]


def _mistral_with_short_window():
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=2,
        pad_token_id=tokenizer.eos_token_id,
    )
    return MistralForCausalLM(config), tokenizer


def _fallbacks(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.name == LOG and "padded forwards" in r.getMessage()]


def test_a_refused_packing_names_its_reason_once(caplog):
    model, tokenizer = _mistral_with_short_window()
    team = Team([model], tokenizers=tokenizer)
    batch = pack_sequences([[3, 4, 5, 6], [3, 4, 5, 6]], [[7, 8, 9], [10, 11]], [3, 2], tokenizer.eos_token_id)
    with caplog.at_level(logging.WARNING, logger=LOG):
        first = team.score([batch], unit="sequence", agents=[0])[0]
        second = team.score([batch], unit="sequence", agents=[0])[0]
    torch.testing.assert_close(first, second)
    messages = _fallbacks(caplog)
    assert len(messages) == 1 and "sliding window" in messages[0] and "MistralForCausalLM" in messages[0]


class _NoKeywords(nn.Module):
    """A model whose forward names every argument: the packed layout cannot reach its attention."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None, logits_to_keep=0):
        return self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
        )


class _Broken(_NoKeywords):
    """A forward with a bug that raises TypeError when given the packed layout."""

    def forward(self, *args, **kwargs):
        if "packed_layout" in kwargs:
            raise TypeError("a bug inside the forward")
        return self.inner(*args, **kwargs)


def test_a_forward_without_keyword_arguments_is_refused_before_its_call(caplog):
    model, tokenizer = _mistral_with_short_window()
    wrapped = _NoKeywords(model)
    assert packed_scoring.packing_refusal(wrapped) == "its forward takes no keyword arguments beyond those it names"
    assert packed_scoring.packing_refusal(model) is None
    batch = pack_sequences([[3, 4, 5]], [[7, 8]], [2], tokenizer.eos_token_id)
    with caplog.at_level(logging.WARNING, logger=LOG):
        assert packed_scoring.packed_token_logprobs(wrapped, **batch) is None
        assert packed_scoring.packed_token_logprobs(wrapped, **batch) is None
    assert len(_fallbacks(caplog)) == 1 and "_NoKeywords" in _fallbacks(caplog)[0]


def test_an_agent_that_cannot_be_packed_is_planned_padded_at_build(caplog):
    model, tokenizer = _mistral_with_short_window()
    wrapped = _NoKeywords(model)
    with caplog.at_level(logging.WARNING, logger=LOG):
        team = Team([wrapped], tokenizers=tokenizer)
    assert team.plan.padded == ("its forward takes no keyword arguments beyond those it names",)
    assert len(_fallbacks(caplog)) == 1 and wrapped in packed_scoring._UNSUPPORTED
    batch = pack_sequences([[3, 4, 5]], [[7, 8]], [2], tokenizer.eos_token_id)
    with caplog.at_level(logging.WARNING, logger=LOG):
        assert team.score([batch], unit="sequence", agents=[0])[0].shape == (1,)
    assert len(_fallbacks(caplog)) == 1  # said once, at build


def test_other_errors_of_a_packed_forward_are_not_swallowed():
    model, tokenizer = _mistral_with_short_window()
    model.config.sliding_window = None
    broken = _Broken(model)
    batch = pack_sequences([[3, 4, 5]], [[7, 8]], [2], tokenizer.eos_token_id)
    with pytest.raises(TypeError, match="a bug inside the forward"):
        packed_scoring.packed_token_logprobs(broken, **batch)
    assert broken not in packed_scoring._UNSUPPORTED
