"""A team loaded as the reference's model_config says: attention implementation, added special tokens
(with the embeddings grown to the tokenizer), dtype."""

from __future__ import annotations

import re

import pytest
import torch
from peft import LoraConfig

from comlrl_lightning import MADPOModule
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.team.options import TeamOptions
from tests.conftest import tiny_team

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


@pytest.mark.parametrize(
    "model_config, message",
    [
        ({"torch_dtype": "float33"}, "model_config.torch_dtype must name a floating torch dtype"),
        ({"dtype": "torch.bfloat16x"}, "model_config.dtype must name a floating torch dtype"),
        ({"torch_dtype": 5}, "model_config.torch_dtype must name a floating torch dtype (float32, bfloat16"),
        ({"dtype": "int8"}, "model_config.dtype must name a floating torch dtype"),
        (
            {"attn_implementation": "bogus"},
            "model_config.attn_implementation 'bogus' is not an attention implementation",
        ),
        (
            {"model_kwargs": {"attn_implementation": "flash_attention_9"}},
            "model_config.model_kwargs.attn_implementation 'flash_attention_9' is not an attention implementation",
        ),
    ],
)
def test_a_bad_dtype_or_attention_in_model_config_is_named_before_any_model_loads(model_config, message):
    from comlrl_lightning.errors import ConfigurationError
    from comlrl_lightning.trainers.preference import MADPOTrainer

    with pytest.raises(ConfigurationError, match=re.escape(message)) as error:
        MADPOTrainer(agent_model="embedded", model_config=model_config)
    assert "\n" not in str(error.value)


def test_an_attribute_error_while_the_team_builds_is_reported_as_it_is(monkeypatch):
    from comlrl_lightning.modules import MADPOModule

    module = MADPOModule(team=TeamOptions())

    def broken(*args, **kwargs):
        raise AttributeError("'Config' object has no attribute 'vocab_size'")

    monkeypatch.setattr(TeamOptions, "build", broken)
    with pytest.raises(
        RuntimeError, match="building the team failed: AttributeError: 'Config' object has no attribute"
    ):
        module.team


def test_the_reward_model_and_the_critics_load_as_the_team():
    from comlrl_lightning.critics import SharedCritic
    from comlrl_lightning.joint_reward import RewardScorer

    team = build(dtype="bfloat16", attn_implementation="eager")
    assert team.loading == {"dtype": "bfloat16", "attn_implementation": "eager"}
    scorer = RewardScorer.from_source("embedded", loading=team.loading)
    assert next(scorer.model.parameters()).dtype == torch.bfloat16
    critic = SharedCritic()
    critic.build(team, ["embedded"] * 2)
    assert next(critic.model.parameters()).dtype == torch.bfloat16
    assert critic.model.backbone.config._attn_implementation == "eager"


def test_a_lora_team_of_a_model_object_without_tokenizers_says_to_pass_them():
    from comlrl_lightning.team.loading import load_model

    options = TeamOptions(
        agents=[load_model("embedded")], num_agents=1, lora=LoraConfig(r=2, target_modules=["c_attn"])
    )
    with pytest.raises(ConfigurationError, match="Tokenizer\\(s\\) must be provided when agents are model objects"):
        options.load_tokenizers(options.sources(centralized=False))


def test_a_missing_model_path_says_it_does_not_exist():
    with pytest.raises(FileNotFoundError, match="model path /nonexistent/model/path does not exist"):
        MADPOModule(team=tiny_team(agent_model="/nonexistent/model/path")).team
