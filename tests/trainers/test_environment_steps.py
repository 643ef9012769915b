"""The reference's env_step: per trained pair (MADPO) or per sampled item (MARLHF), kept across a resume."""

from __future__ import annotations

import torch

from comlrl_lightning.trainers.configs import MADPOConfig, MARLHFConfig
from comlrl_lightning.trainers.environment_steps import (
    EnvironmentSteps,
    batch_env_steps,
    environment_steps_for,
)


def test_a_pair_batch_counts_steps_per_pair_and_an_item_batch_steps_per_item():
    pairs = {"candidate_reward_mean": torch.zeros(3)}
    assert batch_env_steps(pairs, per_pair=2, per_item=4) == 6
    assert batch_env_steps([{"prompt": "a"}, None, {"prompt": "b"}], per_pair=2, per_item=4) == 8


def test_the_config_decides_the_increments():
    madpo = environment_steps_for(MADPOConfig(environment_steps_per_pair=3))
    assert (madpo.per_pair, madpo.per_item) == (3, 0)
    assert environment_steps_for(MADPOConfig(use_environment_step=False)).per_pair == 0
    assert environment_steps_for(MARLHFConfig(num_generations=5)).per_item == 5


def test_the_count_is_saved_and_restored():
    counter = EnvironmentSteps(per_pair=2, per_item=0)
    counter.on_train_batch_end(None, None, None, {"candidate_reward_mean": torch.zeros(4)}, 0)
    restored = EnvironmentSteps(per_pair=2, per_item=0)
    restored.load_state_dict(counter.state_dict())
    assert restored.env_step == 8
