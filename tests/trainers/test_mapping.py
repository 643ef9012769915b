"""How the seed's config fields become options (mapping.py): every field is mapped or listed as having no
effect, a mapped field changes what is built, the docs' table is generated from the mapping, an ignored
field given a value warns, and the reference's model_config becomes the team's options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from comlrl_lightning.team.options import TeamOptions
from comlrl_lightning.trainers import mapping
from comlrl_lightning.trainers.arguments import turns_for
from comlrl_lightning.trainers.configs import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl_lightning.trainers.environment_steps import environment_steps_for
from comlrl_lightning.trainers.mapping import model_loading
from comlrl_lightning.validation import OptionError


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
