"""The reference's trainer attributes on the seed API: views of the Lightning parts, checked in the constructor."""

from __future__ import annotations

import re

import pytest

from comlrl_lightning.defaults import vowel_length_reward
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.trainers.configs import MADPOConfig, MARLHFConfig
from comlrl_lightning.trainers.preference import MADPOTrainer, MARLHFTrainer

ITEMS = [{"prompt": "sun"}, {"prompt": "moon"}]


def test_attributes_are_views_of_the_parts_and_load_no_model_before_they_are_read():
    processor = lambda value: 2 * value  # noqa: E731
    trainer = MADPOTrainer(
        agent_model="embedded",
        train_dataset=ITEMS,
        reward_func=vowel_length_reward,
        reward_processor=processor,
        formatters=[lambda item: "w " + item["prompt"], lambda item: "m " + item["prompt"]],
        args=MADPOConfig(num_agents=2),
    )
    assert trainer.module._team is None  # nothing loaded by the constructor
    assert [f(ITEMS[0]) for f in trainer.formatters] == ["w sun", "m sun"]
    assert trainer.reward_func is vowel_length_reward and trainer.reward_processor is processor
    assert trainer.num_agents == 2 and trainer.env_step == 0 and trainer.model_name == "embedded"
    assert len(trainer.tokenizers) == 2 and trainer.tokenizer is trainer.tokenizers[0]
    assert trainer.module._team is None  # tokenizers load without the models
    agents = trainer.agents
    assert agents == list(trainer.module.team.agents) and len(agents) == 2


def test_the_default_reward_processor_is_the_identity():
    trainer = MADPOTrainer(agent_model="embedded", train_dataset=ITEMS, reward_func=vowel_length_reward)
    assert trainer.reward_processor(0.25) == 0.25


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(formatters=[str]), "Number of formatters must match num_agents when providing a sequence."),
        (dict(formatters=[str, str, str]), "Number of formatters must match num_agents when providing a sequence."),
        (dict(tokenizer=[object()]), "tokenizers length must match agents."),
    ],
)
def test_constructor_checks_fail_in_the_constructor(arguments, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        MADPOTrainer(agent_model="embedded", train_dataset=ITEMS, reward_func=vowel_length_reward, **arguments)


def test_marlhf_has_no_reward_model_and_no_critics_before_training():
    trainer = MARLHFTrainer(
        agent_model="embedded", train_dataset=ITEMS, reward_func=vowel_length_reward, args=MARLHFConfig()
    )
    assert trainer.reward_model is None and trainer.reward_tokenizer is None and trainer.critics == []
