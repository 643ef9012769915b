"""The seed's config dataclasses: fields, defaults, validation and the reference's spellings (how each field
becomes an option: test_mapping.py)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from comlrl_lightning.trainers.configs import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl_lightning.validation import OptionError

# The reference's (CoMLRL 1.4.3) fields and defaults, copied from its dataclasses.
MADPO_DEFAULTS = dict(
    num_train_epochs=20,
    agent_learning_rate=5e-6,
    logging_steps=50,
    num_agents=2,
    collaboration_mode="decentralized",
    parallel_training="none",
    agent_devices=None,
    max_new_tokens=256,
    temperature=0.6,
    top_p=0.6,
    top_k=50,
    num_turns=1,
    discount=1.0,
    joint_mode="aligned",
    early_termination_threshold=None,
    external_prompt_passthrough=False,
    eval_interval=16,
    eval_num_samples=4,
    eval_batch_size=1,
    rollout_buffer_size=2,
    train_batch_size=2,
    advantage_normalization=True,
    advantage_mode="mean",
    reference_kl_enabled=False,
    reference_kl_coef=0.1,
    reference_devices=None,
    preference_num_candidates=80,
    preference_pairs_per_sample=16,
    pair_selection="reward_gap",
    dpo_beta=0.1,
    use_environment_step=True,
    environment_steps_per_pair=2,
)
MARLHF_DEFAULTS = dict(
    MADPO_DEFAULTS,
    rl_algorithm="magrpo",
    num_generations=4,
    reward_model_name=None,
    reward_model_device="cuda:0",
    reward_learning_rate=1e-5,
    reward_num_train_epochs=1,
    reward_train_batch_size=1,
    reward_max_length=None,
    reward_freeze_backbone=False,
    critic_model_name=None,
    critic_learning_rate=None,
    critic_devices=None,
    use_separate_critic=True,
    critic_type="v",
    value_loss_coef=0.6,
    value_clip_range=0.2,
    critic_value_head_hidden_dim=None,
    value_head_hidden_dim=None,
)
ITERATIVE_DEFAULTS = dict(
    num_iterations=6,
    preference_replay_mode="current",
    preference_replay_k=None,
    preference_replay_lambda=None,
    preference_replay_sample_size=None,
    preference_replay_dir=None,
    log_reward_distribution=False,
    policy_checkpoint_dir=None,
    comparator_policy="current",
    comparator_generation_mode="decentralized",
    comparator_centralized_agent_index=0,
    comparator_model_name=None,
    comparator_agents=None,
    comparator_devices=None,
    comparator_num_candidates=None,
    comparator_history_k=None,
    comparator_api_url=None,
    comparator_api_format="generic",
    comparator_api_model=None,
    comparator_api_max_n_per_request=None,
    comparator_api_timeout=120.0,
    comparator_api_headers=None,
    comparator_api_key=None,
    comparator_api_key_env=None,
    comparator_api_key_header="Authorization",
    comparator_api_key_prefix="Bearer",
    comparator_api_response_field="completions",
    comparator_api_extra_body=None,
)
ITER_OVERRIDES = dict(
    num_train_epochs=1, preference_num_candidates=20, preference_pairs_per_sample=4, pair_selection="comparator_reward"
)


@pytest.mark.parametrize(
    "config_class, expected",
    [
        (MADPOConfig, MADPO_DEFAULTS),
        (MARLHFConfig, MARLHF_DEFAULTS),
        (MADPOIterConfig, {**MADPO_DEFAULTS, **ITERATIVE_DEFAULTS, **ITER_OVERRIDES}),
        (
            MARLHFIterConfig,
            {
                **MARLHF_DEFAULTS,
                **ITERATIVE_DEFAULTS,
                **ITER_OVERRIDES,
                "num_train_epochs": 2,
                "reward_num_train_epochs": 2,
                "preference_scoring_reward": "task",
            },
        ),
    ],
)
def test_fields_and_defaults_are_the_references(config_class, expected):
    assert dataclasses.asdict(config_class()) == expected


@pytest.mark.parametrize(
    "config_class, options, message",
    [
        (
            MADPOConfig,
            dict(collaboration_mode="Centralized"),
            "collaboration_mode must be decentralized or centralized.",
        ),
        (MADPOConfig, dict(num_train_epochs=0), "num_train_epochs must be >= 1."),
        (MADPOConfig, dict(eval_interval=-1), "eval_interval must be >= 0."),
        (MADPOConfig, dict(logging_steps=0), "logging_steps must be >= 1."),
        (MADPOConfig, dict(rollout_buffer_size=0), "rollout_buffer_size must be >= 1."),
        (MADPOConfig, dict(train_batch_size=0), "train_batch_size must be >= 1."),
        (MADPOConfig, dict(parallel_training="threads"), "parallel_training must be one of: none, mp."),
        (MADPOConfig, dict(parallel_training="mp"), "parallel_training='mp' requires explicit agent_devices."),
        (MADPOConfig, dict(reference_kl_coef=-0.1), "reference_kl_coef must be >= 0."),
        (
            MADPOConfig,
            dict(reference_kl_enabled=True, reference_devices=["cpu"] * 3),
            "reference_devices length (3) must be 1 or 2.",
        ),
        (MARLHFConfig, dict(num_turns=2), "MARLHF currently supports num_turns=1 only"),
        (MADPOConfig, dict(num_turns=2, collaboration_mode="centralized"), "num_turns > 1 needs collaboration_mode"),
        (
            MADPOIterConfig,
            dict(num_turns=2, comparator_generation_mode="centralized"),
            "centralized comparator generation is single-turn only",
        ),
        (MADPOConfig, dict(preference_num_candidates=1), "preference_num_candidates must be >= 2."),
        (MADPOConfig, dict(preference_pairs_per_sample=0), "preference_pairs_per_sample must be >= 1 or null."),
        (MADPOConfig, dict(dpo_beta=0), "dpo_beta must be > 0."),
        (MADPOConfig, dict(dpo_beta=float("nan")), "dpo_beta must be > 0."),  # MADPOModule's rule, at config time
        (MADPOConfig, dict(environment_steps_per_pair=0), "environment_steps_per_pair must be >= 1."),
        (
            MADPOConfig,
            dict(pair_selection="comparator_reward"),
            "pair_selection must be one of: reward_gap, all, random.",
        ),
        (
            MADPOConfig,
            dict(pair_selection="all"),
            "preference_pairs_per_sample must be null when pair_selection='all'.",
        ),
        (MADPOConfig, dict(joint_mode="cross"), "supports aligned joint_mode only."),
        (MADPOConfig, dict(advantage_mode="median"), "advantage_mode must be one of: mean, raw, max, rloo."),
        (
            MARLHFConfig,
            dict(rl_algorithm="ppo"),
            "rl_algorithm must be one of: magrpo, mareinforce, maremax, marloo, maac, iac.",
        ),
        (MARLHFConfig, dict(num_generations=1), "num_generations must be >= 2 for MAGRPO-family MARLHF backends."),
        (MARLHFConfig, dict(rl_algorithm="iac", num_generations=0), "num_generations must be >= 1."),
        (MARLHFConfig, dict(reward_learning_rate=0), "reward_learning_rate must be > 0."),
        (MARLHFConfig, dict(reward_max_length=0), "reward_max_length must be >= 1 or null."),
        (MARLHFConfig, dict(critic_learning_rate=-1.0), "critic_learning_rate must be > 0 or null."),
        (MARLHFConfig, dict(critic_type="a"), "critic_type must be one of: v, q."),
        (MARLHFConfig, dict(value_loss_coef=0), "value_loss_coef must be > 0."),
        (MARLHFConfig, dict(value_clip_range=0), "value_clip_range must be > 0 or null."),
        (MADPOIterConfig, dict(num_iterations=0), "num_iterations must be >= 1."),
        (
            MADPOIterConfig,
            dict(preference_replay_mode="fifo"),
            "preference_replay_mode must be one of: current, nearest_k, all_history, lambda_decay.",
        ),
        (
            MADPOIterConfig,
            dict(preference_replay_k=2),
            "preference_replay_k must be null or 1 when preference_replay_mode='current'.",
        ),
        (MADPOIterConfig, dict(preference_replay_sample_size=4), "preference_replay_sample_size is only valid when"),
        (
            MADPOIterConfig,
            dict(preference_replay_lambda=0.5),
            "preference_replay_lambda is only valid when preference_replay_mode='lambda_decay'.",
        ),
        (
            MADPOIterConfig,
            dict(preference_replay_mode="nearest_k"),
            "preference_replay_k is required when preference_replay_mode='nearest_k'.",
        ),
        (
            MADPOIterConfig,
            dict(preference_replay_mode="all_history", preference_replay_k=2),
            "preference_replay_k is only valid when preference_replay_mode='nearest_k'.",
        ),
        (
            MADPOIterConfig,
            dict(preference_replay_mode="lambda_decay"),
            "preference_replay_lambda is required when preference_replay_mode='lambda_decay'.",
        ),
        (
            MADPOIterConfig,
            dict(preference_replay_mode="lambda_decay", preference_replay_lambda=1.5),
            "preference_replay_lambda must be in [0, 1].",
        ),
        (
            MADPOIterConfig,
            dict(preference_replay_mode="all_history", preference_replay_sample_size=0),
            "preference_replay_sample_size must be >= 1 or null.",
        ),
        (
            MADPOIterConfig,
            dict(comparator_policy="teacher"),
            "comparator_policy must be one of: current, current_copy, model, history, api.",
        ),
        (
            MADPOIterConfig,
            dict(comparator_generation_mode="joint"),
            "comparator_generation_mode must be one of: decentralized, centralized.",
        ),
        (
            MADPOIterConfig,
            dict(comparator_generation_mode="centralized", comparator_centralized_agent_index=2),
            "comparator_centralized_agent_index must be smaller than num_agents.",
        ),
        (MADPOIterConfig, dict(comparator_num_candidates=0), "comparator_num_candidates must be >= 1 or null."),
        (
            MADPOIterConfig,
            dict(comparator_policy="model"),
            "comparator_model_name or comparator_agents is required when comparator_policy='model'.",
        ),
        (
            MADPOIterConfig,
            dict(comparator_history_k=2),
            "comparator_history_k is only valid when comparator_policy='history'.",
        ),
        (
            MADPOIterConfig,
            dict(comparator_policy="history", comparator_model_name="m"),
            "comparator_model_name and comparator_agents are only valid when comparator_policy='model'.",
        ),
        (
            MADPOIterConfig,
            dict(comparator_policy="api"),
            "comparator_api_url is required when comparator_policy='api'.",
        ),
        (
            MADPOIterConfig,
            dict(comparator_api_format="soap"),
            "comparator_api_format must be one of: generic, openai, anthropic, openai_responses.",
        ),
        (MADPOIterConfig, dict(comparator_api_key="literal"), "comparator_api_key: a key is never a config value"),
        (
            MADPOIterConfig,
            dict(collaboration_mode="centralized", comparator_centralized_agent_index=1),
            "Centralized collaboration has only actor index 0.",
        ),
        (
            MARLHFIterConfig,
            dict(preference_scoring_reward="human"),
            "preference_scoring_reward must be one of: task, reward_model.",
        ),
    ],
)
def test_validation_names_the_field(config_class, options, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        config_class(**options)


def test_the_references_spellings_are_normalised():
    config = MARLHFIterConfig(
        preference_replay_mode="lambda",
        preference_replay_lambda=1,
        comparator_policy="previous",
        comparator_generation_mode="single-agent",
        comparator_api_format="codex",
        rl_algorithm=" MAReforce ",
        preference_scoring_reward="learned",
        parallel_training="null",
        pair_selection=" Random ",
    )
    assert (config.preference_replay_mode, config.preference_replay_lambda, config.comparator_policy) == (
        "lambda_decay",
        1.0,
        "history",
    )
    assert (config.comparator_generation_mode, config.comparator_api_format) == ("centralized", "openai_responses")
    assert (config.rl_algorithm, config.advantage_mode, config.preference_scoring_reward) == (
        "mareinforce",
        "raw",
        "reward_model",
    )
    assert (config.parallel_training, config.pair_selection, config.comparator_history_k) == ("none", "random", 1)
    assert MADPOIterConfig(collaboration_mode="centralized").comparator_generation_mode == "centralized"
