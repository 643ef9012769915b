"""A team loaded as the reference's model_config says: attention implementation, added special tokens
(with the embeddings grown to the tokenizer), dtype."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from comlrl_lightning.options import OptionError
from comlrl_lightning.team.options import TeamOptions
from comlrl_lightning.trainers.mapping import model_loading

TOOL = {"additional_special_tokens": ["<tool>", "<end>"]}


def build(**options):
    team_options = TeamOptions(**options)
    sources = team_options.sources(centralized=False)
    return team_options.build(sources, team_options.load_tokenizers(sources))


def test_special_tokens_are_added_and_the_embeddings_grow_to_the_tokenizer():
    team = build(special_tokens=TOOL, attn_implementation="eager")
    for agent, tokenizer in zip(team.agents, team.tokenizers):
        ids = tokenizer.convert_tokens_to_ids(["<tool>", "<end>"])
        assert max(ids) < agent.get_input_embeddings().num_embeddings == len(tokenizer)
        assert agent.get_output_embeddings().weight.shape[0] == len(tokenizer)
        assert agent.config._attn_implementation == "eager"
        logits = agent(torch.tensor([ids])).logits  # the new ids index the table
        assert logits.shape[-1] == len(tokenizer)


def test_a_lora_team_grows_its_one_base_model():
    team = build(special_tokens=TOOL, lora=LoraConfig(r=2, target_modules=["c_attn"]))
    base = team.agents[0].get_base_model()
    assert base.get_input_embeddings().num_embeddings == len(team.tokenizers[0])


def test_model_config_maps_onto_team_options_and_refuses_what_it_does_not_take():
    assert model_loading({"torch_dtype": torch.bfloat16, "model_kwargs": {"attn_implementation": "sdpa"}}) == {
        "dtype": "bfloat16",
        "attn_implementation": "sdpa",
        "special_tokens": None,
    }
    with pytest.raises(OptionError, match="model_config: trust_remote_code not supported"):
        model_loading({"trust_remote_code": True})
    with pytest.raises(OptionError, match="special_tokens must be a mapping"):
        TeamOptions(special_tokens=["<tool>"])


def test_the_reward_model_and_the_critics_load_as_the_team():
    from comlrl_lightning.models.critics import SharedCritic
    from comlrl_lightning.models.joint_reward import RewardScorer

    team = build(dtype="bfloat16", attn_implementation="eager")
    assert team.loading == {"dtype": "bfloat16", "attn_implementation": "eager"}
    scorer = RewardScorer.from_source("embedded", loading=team.loading)
    assert next(scorer.model.parameters()).dtype == torch.bfloat16
    critic = SharedCritic()
    critic.build(team, ["embedded"] * 2)
    assert next(critic.model.parameters()).dtype == torch.bfloat16
    assert critic.model.backbone.config._attn_implementation == "eager"
