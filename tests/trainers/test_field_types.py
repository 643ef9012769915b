"""The seed's config fields checked against their declared types, naming the field and never the value."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comlrl_lightning.errors import ConfigurationTypeError
from comlrl_lightning.trainers.configs import MADPOConfig, MADPOIterConfig, MARLHFConfig


@pytest.mark.parametrize(
    "config, fields, message",
    [
        (MADPOConfig, dict(num_train_epochs="3"), "num_train_epochs must be an integer (got str)."),
        (MADPOConfig, dict(num_agents=2.5), "num_agents must be an integer (got float)."),
        (MADPOConfig, dict(num_agents=True), "num_agents must be an integer (got bool)."),
        (MADPOConfig, dict(dpo_beta="0.1"), "dpo_beta must be a number (got str)."),
        (MADPOConfig, dict(top_k="50"), "top_k must be an integer or null (got str)."),
        (MADPOConfig, dict(agent_devices=["cpu", 0]), "agent_devices must be a string or a list of strings or null"),
        (
            MADPOIterConfig,
            dict(preference_replay_mode="lambda_decay", preference_replay_lambda="abc"),
            "preference_replay_lambda must be a number or null (got str).",
        ),
        (MADPOIterConfig, dict(comparator_api_headers={"X-A": 1}), "comparator_api_headers must be a mapping or null"),
        (MADPOIterConfig, dict(comparator_api_key_env=["A"]), "comparator_api_key_env must be a string or null"),
        (MARLHFConfig, dict(num_generations=4.0), "num_generations must be an integer (got float)."),
    ],
)
def test_a_field_of_the_wrong_type_is_named(config, fields, message):
    with pytest.raises(ConfigurationTypeError) as error:
        config(**fields)
    assert str(error.value).startswith(message) and isinstance(error.value, (TypeError, ValueError))


def test_the_types_people_pass_are_accepted():
    config = MADPOIterConfig(
        agent_learning_rate=1,  # an int for a float
        agent_devices=torch.device("cpu"),
        preference_replay_dir=Path("runs/replay"),
        preference_replay_mode="lambda",
        preference_replay_lambda=1,
        comparator_api_extra_body={"max_tokens": 8, "nested": {"x": [1]}},
    )
    assert config.preference_replay_lambda == 1.0


def test_a_secret_pasted_into_a_field_is_not_echoed():
    with pytest.raises(ConfigurationTypeError) as error:
        MADPOIterConfig(comparator_api_key_env=["sk-fake0123456789abcdef"])
    assert "sk-fake" not in str(error.value)
