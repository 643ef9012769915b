"""The seed's config dataclasses: fields, defaults, validation, and that every field maps onto an option."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from comlrl_lightning.trainers import mapping
from comlrl_lightning.trainers.arguments import turns_for
from comlrl_lightning.trainers.configs import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl_lightning.trainers.environment_steps import environment_steps_for
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


# ---------------------------------------------------------------------------------------------
# The mapping: every field is mapped or listed as having no effect, and a mapped field does something


def every_field():
    return {f.name for cls in (MADPOIterConfig, MARLHFIterConfig) for f in dataclasses.fields(cls)}


def test_every_field_is_mapped_or_listed_with_a_reason():
    assert set(mapping.FIELD_MAP) | set(mapping.IGNORED) == every_field()
    assert not set(mapping.FIELD_MAP) & set(mapping.IGNORED)
    assert all(reason.strip() for reason in mapping.IGNORED.values())


def built(config) -> dict:
    """Everything the trainers build from a config, as comparable values."""
    marlhf = isinstance(config, MARLHFConfig)
    parts = dict(
        team=mapping.team_for(config, {"agent_model": "embedded"}),
        module=mapping.module_options(config, marlhf),
        data=mapping.data_options(config),
        trainer=mapping.trainer_options(config),
        wandb=mapping.wandb_options(config),
        env_steps=vars(environment_steps_for(config)),
        collaboration=repr(mapping.collaboration_for(config)),
        turns=repr(turns_for(config, "tests.helpers.turn_helpers.reward_feedback")),
    )
    if hasattr(config, "num_iterations"):
        comparator = mapping.comparator_for(config)
        parts["comparator"] = (type(comparator).__name__, repr(comparator), repr(vars(comparator)))
        replay = mapping.replay_for(config)
        parts["replay"] = (type(replay).__name__, repr(vars(replay)))
    if marlhf:
        critic = mapping.critic_for(config)
        parts["critic"] = (
            None
            if critic is None
            else (type(critic).__name__, repr({k: v for k, v in vars(critic).items() if not k.startswith("_")}))
        )
    return parts


API = dict(comparator_policy="api", comparator_api_url="http://127.0.0.1:9/v1")
IAC_HEAD = dict(rl_algorithm="iac", use_separate_critic=False)
CHANGES = {  # field -> (config class, base options, new value)
    "num_train_epochs": (MADPOIterConfig, {}, 3),
    "agent_learning_rate": (MADPOConfig, {}, 1e-3),
    "logging_steps": (MADPOConfig, {}, 5),
    "num_agents": (MADPOConfig, {}, 3),
    "collaboration_mode": (MADPOConfig, {}, "centralized"),
    "parallel_training": (MADPOConfig, dict(agent_devices=["cpu", "meta"]), "mp"),
    "agent_devices": (MADPOConfig, {}, "cpu"),
    "max_new_tokens": (MADPOConfig, {}, 8),
    "temperature": (MADPOConfig, {}, 1.0),
    "top_p": (MADPOConfig, {}, 1.0),
    "top_k": (MADPOConfig, {}, None),
    "num_turns": (MADPOConfig, {}, 2),
    "discount": (MADPOConfig, dict(num_turns=2), 0.5),
    "early_termination_threshold": (MADPOConfig, dict(num_turns=2), 0.0),
    "joint_mode": None,  # must stay 1 / aligned
    "eval_interval": (MADPOConfig, {}, 0),
    "eval_num_samples": (MADPOConfig, {}, 8),
    "eval_batch_size": (MADPOConfig, {}, 4),
    "rollout_buffer_size": (MADPOConfig, {}, 8),
    "train_batch_size": (MADPOConfig, {}, 8),
    "advantage_normalization": (MARLHFConfig, {}, False),
    "reference_kl_enabled": (MARLHFConfig, {}, True),
    "reference_kl_coef": (MARLHFConfig, dict(reference_kl_enabled=True), 0.5),  # the penalty's: no penalty, no coef
    "reference_devices": (MARLHFConfig, dict(reference_kl_enabled=True), "cpu"),
    "preference_num_candidates": (MADPOConfig, {}, 4),
    "preference_pairs_per_sample": (MADPOConfig, {}, 2),
    "pair_selection": (MADPOConfig, {}, "random"),
    "dpo_beta": (MADPOConfig, {}, 0.5),
    "rl_algorithm": (MARLHFConfig, {}, "marloo"),
    "num_generations": (MARLHFConfig, {}, 8),
    "reward_model_name": (MARLHFConfig, {}, "rm"),
    "reward_learning_rate": (MARLHFConfig, {}, 1e-3),
    "reward_num_train_epochs": (MARLHFConfig, {}, 3),
    "reward_train_batch_size": (MARLHFConfig, {}, 4),
    "reward_max_length": (MARLHFConfig, {}, 64),
    "reward_freeze_backbone": (MARLHFConfig, {}, True),
    "critic_model_name": (MARLHFConfig, dict(rl_algorithm="maac"), "critic"),
    "critic_learning_rate": (MARLHFConfig, dict(rl_algorithm="maac"), 1e-3),
    "critic_devices": (MARLHFConfig, dict(rl_algorithm="iac"), "cpu"),
    "use_separate_critic": (MARLHFConfig, dict(rl_algorithm="iac"), False),
    "critic_type": (MARLHFConfig, dict(rl_algorithm="maac"), "q"),
    "value_loss_coef": (MARLHFConfig, dict(rl_algorithm="maac"), 1.0),
    "value_clip_range": (MARLHFConfig, IAC_HEAD, 0.5),
    "critic_value_head_hidden_dim": (MARLHFConfig, dict(rl_algorithm="maac"), 16),
    "value_head_hidden_dim": (MARLHFConfig, IAC_HEAD, 16),
    "num_iterations": (MADPOIterConfig, {}, 2),
    "preference_replay_mode": (MADPOIterConfig, {}, "all_history"),
    "preference_replay_k": (MADPOIterConfig, dict(preference_replay_mode="nearest_k", preference_replay_k=1), 3),
    "preference_replay_lambda": (
        MADPOIterConfig,
        dict(preference_replay_mode="lambda_decay", preference_replay_lambda=0.5),
        0.9,
    ),
    "preference_replay_sample_size": (MADPOIterConfig, dict(preference_replay_mode="all_history"), 64),
    "preference_replay_dir": (MADPOIterConfig, {}, "rounds"),
    "policy_checkpoint_dir": (MADPOIterConfig, {}, "snapshots"),
    "log_reward_distribution": None,  # a callback added by train(): tested end to end
    "comparator_policy": (MADPOIterConfig, {}, "current_copy"),
    "comparator_generation_mode": (MADPOIterConfig, {}, "centralized"),
    "comparator_centralized_agent_index": (MADPOIterConfig, dict(comparator_generation_mode="centralized"), 1),
    "comparator_model_name": (MADPOIterConfig, dict(comparator_policy="model", comparator_model_name="a"), "b"),
    "comparator_agents": (MADPOIterConfig, dict(comparator_policy="model", comparator_agents=["a"]), ["b", "c"]),
    "comparator_devices": (MADPOIterConfig, dict(comparator_policy="current_copy"), "cpu"),
    "comparator_num_candidates": (MADPOIterConfig, {}, 4),
    "comparator_history_k": (MADPOIterConfig, dict(comparator_policy="history"), 2),
    "comparator_api_url": (MADPOIterConfig, API, "http://127.0.0.1:9/v2"),
    "comparator_api_format": (MADPOIterConfig, API, "openai"),
    "comparator_api_model": (MADPOIterConfig, API, "m"),
    "comparator_api_max_n_per_request": (MADPOIterConfig, API, 2),
    "comparator_api_timeout": (MADPOIterConfig, API, 5.0),
    "comparator_api_headers": (MADPOIterConfig, API, {"X-Team": "a"}),
    "comparator_api_key_env": (MADPOIterConfig, API, "MY_KEY"),
    "comparator_api_key_header": (MADPOIterConfig, API, "x-api-key"),
    "comparator_api_key_prefix": (MADPOIterConfig, API, ""),
    "comparator_api_response_field": (MADPOIterConfig, API, "data.texts"),
    "comparator_api_extra_body": (MADPOIterConfig, API, {"seed": 1}),
    "preference_scoring_reward": (MARLHFIterConfig, {}, "reward_model"),
    "use_environment_step": (MADPOConfig, {}, False),
    "environment_steps_per_pair": (MADPOConfig, {}, 3),
}


def test_every_mapped_field_has_a_change_below():
    assert set(CHANGES) == set(mapping.FIELD_MAP)
    # one allowed value each (passed through, checked by the config) / a callback (tested end to end)
    assert {field for field, change in CHANGES.items() if change is None} == {
        "joint_mode",
        "log_reward_distribution",
    }


@pytest.mark.parametrize("field", sorted(field for field, change in CHANGES.items() if change is not None))
def test_a_mapped_field_changes_what_is_built(field):
    config_class, base, value = CHANGES[field]
    assert built(config_class(**base)) != built(config_class(**{**base, field: value}))


def test_the_docs_table_is_generated_from_the_mapping():
    from comlrl_lightning.trainers.mapping import markdown_table

    page = Path(__file__).parents[2] / "docs" / "coming-from-comlrl.md"
    assert markdown_table() in page.read_text(encoding="utf-8")


def test_ignored_fields_with_a_value_warn():
    with pytest.warns(UserWarning, match=r"external_prompt_passthrough=True has no effect here: multi-turn only"):
        mapping.warn_ignored(MADPOConfig(external_prompt_passthrough=True))
