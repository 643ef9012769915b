"""How each field of the seed's configs becomes an option of the Lightning modules, data modules and trainer.

:data:`FIELD_MAP` is the table (the documentation's "Coming from CoMLRL" table is generated from it and a
test keeps them equal); the ``*_options`` functions below do what it says. A field is either mapped
onto one option or listed in :data:`IGNORED` with the reason it has no effect here.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Dict, Optional

from comlrl_lightning.comparators import (
    ApiComparator,
    CentralizedComparator,
    Comparator,
    CurrentComparator,
    CurrentCopyComparator,
    HistoryComparator,
    HttpOptions,
    ModelComparator,
)
from comlrl_lightning.critics import Critic, IndividualCritics, SharedCritic
from comlrl_lightning.datamodules.task_data import dataloader_reload, total_epochs
from comlrl_lightning.errors import ConfigurationTypeError
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.joint_reward import RewardModelFit
from comlrl_lightning.modules.collaboration import Centralized
from comlrl_lightning.modules.magrpo import GROUP_BASELINES, ReferenceKL
from comlrl_lightning.rounds.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayRule,
)
from comlrl_lightning.team.loading import check_attention, check_dtype
from comlrl_lightning.team.options import TeamOptions
from comlrl_lightning.trainers.configs import MADPOConfig, MARLHFConfig
from comlrl_lightning.validation import OptionError, require

SAMPLING_FIELDS = ("max_new_tokens", "temperature", "top_p", "top_k")
"""The config fields that are sampling settings (``GenerationSettings``' fields but ``extra``)."""

FIELD_MAP: Dict[str, str] = {
    "num_train_epochs": "`data.num_train_epochs` (MADPO: epochs over the pairs; MARLHF: policy epochs; per round when iterative)",
    "agent_learning_rate": "`model.agent_learning_rate`",
    "logging_steps": "W&B: training metrics logged at least `logging_steps` environment steps apart, as the reference (the CSV log has every step)",
    "num_agents": "`model.team.num_agents` (and the data module's)",
    "collaboration_mode": "`model.collaboration`: `Decentralized()` or `Centralized(adapter)`",
    "parallel_training": "`none`: every agent on the first of `agent_devices`; `mp`: agent i on `agent_devices[i]` (one process, as `model.team.agent_devices`)",
    "agent_devices": "`model.team.agent_devices`",
    "max_new_tokens": "`model.sampling.max_new_tokens`",
    "temperature": "`model.sampling.temperature`",
    "top_p": "`model.sampling.top_p`",
    "top_k": "`model.sampling.top_k`",
    "num_turns": "`num_turns` of `data.task.turns` (MADPO; the constructor's `external_transition` is its `external_transition`; MARLHF: must be 1)",
    "joint_mode": "must be aligned: joint responses pair the same candidate index (checked by the config)",
    "eval_interval": "`trainer.val_check_interval` in optimizer updates (0: `trainer.limit_val_batches=0`)",
    "eval_num_samples": "`data.eval_num_samples`",
    "eval_batch_size": "`data.eval_batch_size`",
    "rollout_buffer_size": "the default of `train_batch_size`",
    "train_batch_size": "`data.train_batch_size` (MADPO: pairs per update; MARLHF: task items per policy update)",
    "advantage_normalization": "`model.advantage_normalization` (MARLHF)",
    "reference_kl_enabled": "`model.reference_kl`: a `ReferenceKL`, or null for no penalty (MARLHF; MADPO ignores it, as the reference)",
    "reference_kl_coef": "`coef` of `model.reference_kl` (MARLHF)",
    "reference_devices": "`devices` of `model.reference_kl` (MARLHF)",
    "preference_num_candidates": "`data.preference_num_candidates`",
    "preference_pairs_per_sample": "`data.preference_pairs_per_sample`",
    "pair_selection": "`data.pair_selection`",
    "dpo_beta": "`model.dpo_beta` (MADPO)",
    "rl_algorithm": "`model.rl_algorithm`",
    "num_generations": "`model.num_generations`",
    "reward_model_name": "`model_name` of `model.reward_model`",
    "reward_learning_rate": "`learning_rate` of `model.reward_model`",
    "reward_num_train_epochs": "`num_train_epochs` of `model.reward_model`",
    "reward_train_batch_size": "`train_batch_size` of `model.reward_model`",
    "reward_max_length": "`max_length` of `model.reward_model`",
    "reward_freeze_backbone": "`freeze_backbone` of `model.reward_model`",
    "critic_model_name": "`model_name` of `model.critic` (`SharedCritic` for maac, `IndividualCritics` for iac)",
    "critic_learning_rate": "`learning_rate` of `model.critic`",
    "critic_devices": "`devices` of `model.critic`",
    "use_separate_critic": "`use_separate_critic` of `IndividualCritics`",
    "critic_type": "`critic_type` of `model.critic`",
    "value_loss_coef": "`value_loss_coef` of `model.critic`",
    "value_clip_range": "`value_clip_range` of `IndividualCritics`",
    "critic_value_head_hidden_dim": "`critic_value_head_hidden_dim` of `model.critic`",
    "value_head_hidden_dim": "`value_head_hidden_dim` of `IndividualCritics`",
    "num_iterations": "`data.num_iterations` (`trainer.max_epochs` = rounds x `num_train_epochs`)",
    "preference_replay_mode": "`data.replay`: `CurrentReplay`, `NearestKReplay`, `AllHistoryReplay` or `LambdaDecayReplay`",
    "preference_replay_k": "`k` of `NearestKReplay`",
    "preference_replay_lambda": "`lam` of `LambdaDecayReplay`",
    "preference_replay_sample_size": "`sample_size` of the replay rule",
    "preference_replay_dir": "`data.preference_replay_dir`",
    "log_reward_distribution": "the `RewardDistributions` callback",
    "policy_checkpoint_dir": "`data.policy_checkpoint_dir`",
    "comparator_policy": "`data.comparator`: `CurrentComparator`, `CurrentCopyComparator`, `ModelComparator`, `HistoryComparator` or `ApiComparator`",
    "comparator_generation_mode": "`centralized` wraps the comparator in `CentralizedComparator`",
    "comparator_centralized_agent_index": "`agent_index` of `CentralizedComparator`",
    "comparator_model_name": "`model_name` of `ModelComparator`",
    "comparator_agents": "`agents` of `ModelComparator`",
    "comparator_devices": "`devices` of `CurrentCopyComparator` / `ModelComparator`",
    "comparator_num_candidates": "`num_candidates` of the comparator",
    "comparator_history_k": "`k` of `HistoryComparator`",
    "comparator_api_url": "`url` of `ApiComparator`",
    "comparator_api_format": "`format` of `ApiComparator` (an unknown format is an error, not silently generic)",
    "comparator_api_model": "`model` of `ApiComparator`",
    "comparator_api_max_n_per_request": "`max_n_per_request` of `ApiComparator`",
    "comparator_api_timeout": "`http.timeout` of `ApiComparator`",
    "comparator_api_headers": "`headers` of `ApiComparator` (credentials in headers are refused)",
    "comparator_api_key_env": "`key_env` of `ApiComparator`",
    "comparator_api_key_header": "`key_header` of `ApiComparator`",
    "comparator_api_key_prefix": "`key_prefix` of `ApiComparator`",
    "comparator_api_response_field": "`response_field` of `ApiComparator`",
    "comparator_api_extra_body": "`extra_body` of `ApiComparator`",
    "preference_scoring_reward": "`model.preference_scoring_reward`",
    "use_environment_step": "`trainer.env_step` advances with MADPO's updates (the W&B step, as the reference)",
    "environment_steps_per_pair": "`trainer.env_step` increment per trained pair (the W&B step, as the reference)",
    "discount": "`discount` of `data.task.turns` when `num_turns` > 1: a trajectory's return is the discounted sum of its turns' rewards (the modules' default, null, is the last turn's reward)",
    "early_termination_threshold": "`early_termination_threshold` of `data.task.turns` (a trajectory ends after a turn whose processed reward reaches it)",
}
"""Every mapped field and the option it becomes."""

IGNORED: Dict[str, str] = {
    "external_prompt_passthrough": "multi-turn only; no effect in single-turn training (as in the reference)",
    "advantage_mode": "decided by `rl_algorithm` for the group baselines and unused by MADPO and the critics (as in the reference)",
    "reward_model_device": "the reward model is part of the team module and lives on its device",
    "comparator_api_key": "refused: a key is never a config value; name an environment variable in `comparator_api_key_env`",
}
"""Fields accepted for compatibility that have no effect here, and why."""


def markdown_table() -> str:
    """The mapping as the documentation's table: every field, what it becomes here (or why it has no effect)."""
    rows = ["| seed field | here |", "|---|---|"]
    rows += [f"| `{field}` | {target} |" for field, target in FIELD_MAP.items()]
    rows += [f"| `{field}` | no effect: {reason} |" for field, reason in IGNORED.items()]
    return "\n".join(rows)


def warn_ignored(config: MADPOConfig) -> None:
    """Warn once per ignored field whose value differs from the default (it would have no effect)."""
    for field in dataclasses.fields(config):
        if field.name in IGNORED and field.name != "advantage_mode" and getattr(config, field.name) != field.default:
            warnings.warn(
                f"{field.name}={getattr(config, field.name)!r} has no effect here: {IGNORED[field.name]}.", stacklevel=3
            )


def _same(config: Any, *names: str) -> Dict[str, Any]:
    """The fields ``names`` of ``config`` as options of the same name."""
    return {name: getattr(config, name) for name in names}


def _devices(spec: Any) -> Any:
    """A device field as the options take it: ``None``, one device name, or a list."""
    return spec if spec is None or isinstance(spec, str) else list(spec)


MODEL_CONFIG_KEYS = ("torch_dtype", "dtype", "attn_implementation", "model_kwargs", "special_tokens")
"""The reference's ``model_config`` keys taken here."""


def model_loading(model_config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The reference's ``model_config`` as team options: ``torch_dtype`` / ``dtype`` -> ``dtype``
    (a name), ``attn_implementation`` (also from ``model_kwargs``, as the reference reads it) and
    ``special_tokens``. Another key is an error naming it (the reference would ignore it)."""
    model_config = dict(model_config or {})
    unknown = sorted(set(model_config) - set(MODEL_CONFIG_KEYS))
    if unknown:
        raise OptionError(f"model_config: {', '.join(unknown)} not supported (taken: {', '.join(MODEL_CONFIG_KEYS)}).")
    nested = dict(model_config.get("model_kwargs") or {})
    others = sorted(set(nested) - {"attn_implementation"})
    if others:
        raise OptionError(f"model_config.model_kwargs: {', '.join(others)} not supported (taken: attn_implementation).")
    key = "torch_dtype" if model_config.get("torch_dtype") is not None else "dtype"
    dtype = model_config.get(key)
    dtype = str(dtype).replace("torch.", "") if dtype is not None and dtype != "auto" else None  # auto: as saved
    attention_key = (
        "attn_implementation" if "attn_implementation" in model_config else "model_kwargs.attn_implementation"
    )
    attention = model_config.get("attn_implementation", nested.get("attn_implementation"))
    check_dtype(dtype, f"model_config.{key}")  # named as given, before any model loads
    check_attention(attention, f"model_config.{attention_key}")
    return dict(dtype=dtype, attn_implementation=attention, special_tokens=model_config.get("special_tokens"))


def team_for(
    config: MADPOConfig, sources: Dict[str, Any], tokenizers: Any = None, model_config: Optional[Dict[str, Any]] = None
) -> TeamOptions:
    """The ``team`` option: the models in ``sources`` (``agent_model`` or ``agents``), the config's
    ``num_agents`` and its devices (``parallel_training="none"`` keeps the first, as the reference),
    loaded as ``model_config`` says (:func:`model_loading`)."""
    devices = config.agent_devices
    if devices is not None and not isinstance(devices, str):
        devices = list(devices) if config.parallel_training == "mp" else list(devices)[:1]
    return TeamOptions(
        **sources,
        num_agents=config.num_agents,
        tokenizers=tokenizers,
        agent_devices=devices,
        **model_loading(model_config),
    )


def module_options(config: MADPOConfig, marlhf: bool) -> Dict[str, Any]:
    """Keyword options of ``MADPOModule`` / ``MARLHFModule`` (sampling and algorithm) from ``config``;
    the team is :func:`team_for`'s."""
    options: Dict[str, Any] = dict(
        agent_learning_rate=config.agent_learning_rate,
        sampling=GenerationSettings(**_same(config, *SAMPLING_FIELDS)),
    )
    if not marlhf:
        return {**options, "dpo_beta": config.dpo_beta}
    if not isinstance(config, MARLHFConfig):  # the MARLHF trainers take their own configs only (check_arguments)
        raise ConfigurationTypeError(f"MARLHF options come from a MARLHFConfig (got {type(config).__name__}).")
    options.update(_same(config, "rl_algorithm", "num_generations", "advantage_normalization"))
    if config.reference_kl_enabled:
        options["reference_kl"] = ReferenceKL(coef=config.reference_kl_coef, devices=_devices(config.reference_devices))
    options["reward_model"] = RewardModelFit(
        model_name=config.reward_model_name,
        learning_rate=config.reward_learning_rate,
        max_length=config.reward_max_length,
        freeze_backbone=config.reward_freeze_backbone,
        num_train_epochs=config.reward_num_train_epochs,
        train_batch_size=config.reward_train_batch_size,
    )
    options["preference_scoring_reward"] = getattr(config, "preference_scoring_reward", "task")
    return options


def data_options(config: MADPOConfig) -> Dict[str, Any]:
    """Keyword options of the (iterative) preference data module from ``config`` (the task and parts excluded)."""
    options = _same(
        config,
        "num_agents",
        "train_batch_size",
        "num_train_epochs",
        "eval_num_samples",
        "eval_batch_size",
        "preference_num_candidates",
        "preference_pairs_per_sample",
        "pair_selection",
    )
    if hasattr(config, "num_iterations"):
        options.update(_same(config, "num_iterations", "preference_replay_dir", "policy_checkpoint_dir"))
    return options


def trainer_options(config: MADPOConfig) -> Dict[str, Any]:
    """Keyword options of ``lightning.Trainer``: epochs, evaluation period and logging period.

    ``eval_interval`` counts optimizer updates across epochs (``check_val_every_n_epoch=None``), as
    the reference's; no sanity validation, and a dataloader reload every epoch for rounds, as the
    command line.
    """
    options: Dict[str, Any] = dict(
        max_epochs=total_epochs(config.num_train_epochs, getattr(config, "num_iterations", 1)),
        log_every_n_steps=1,  # the W&B logger throttles by environment steps, as the reference
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,  # the module evaluates before the first update itself
        reload_dataloaders_every_n_epochs=dataloader_reload(getattr(config, "num_iterations", None)),
    )
    if config.eval_interval == 0:
        options.update(limit_val_batches=0, val_check_interval=None)
    else:
        options.update(val_check_interval=config.eval_interval)
    return options


def wandb_options(config: MADPOConfig) -> Dict[str, Any]:
    """Options of the W&B logger (:class:`~comlrl_lightning.trainers.wandb_compat.ReferenceStepWandbLogger`):
    training metrics at least ``logging_steps`` environment steps apart, as the reference."""
    return {"logging_steps": config.logging_steps}


def collaboration_for(config: MADPOConfig, adapter: Any = None) -> Optional[Centralized]:
    """``Centralized(adapter)`` for ``collaboration_mode="centralized"``, else ``None`` (one agent per role)."""
    return Centralized(adapter) if config.collaboration_mode == "centralized" else None


def replay_for(config: Any) -> ReplayRule:
    """The replay rule object of ``preference_replay_mode`` and its arguments."""
    mode, size = config.preference_replay_mode, config.preference_replay_sample_size
    if mode == "nearest_k":
        return NearestKReplay(k=config.preference_replay_k, sample_size=size)
    if mode == "all_history":
        return AllHistoryReplay(sample_size=size)
    if mode == "lambda_decay":
        return LambdaDecayReplay(lam=config.preference_replay_lambda, sample_size=size)
    return CurrentReplay()


def comparator_for(config: Any, adapter: Any = None) -> Comparator:
    """The comparator object of ``comparator_policy`` (wrapped in ``CentralizedComparator`` when
    ``comparator_generation_mode`` is centralized and the team itself is decentralized)."""
    policy, count = config.comparator_policy, config.comparator_num_candidates
    devices = _devices(config.comparator_devices)
    if policy == "current_copy":
        comparator: Comparator = CurrentCopyComparator(devices=devices, num_candidates=count)
    elif policy == "model":
        agents = list(config.comparator_agents) if config.comparator_agents is not None else None
        comparator = ModelComparator(
            model_name=None if agents else config.comparator_model_name,
            agents=agents,
            devices=devices,
            num_candidates=count,
        )
    elif policy == "history":
        comparator = HistoryComparator(k=config.comparator_history_k, num_candidates=count)
    elif policy == "api":
        comparator = ApiComparator(
            url=config.comparator_api_url,
            format=config.comparator_api_format,
            model=config.comparator_api_model,
            key_env=config.comparator_api_key_env,
            key_header=config.comparator_api_key_header,
            key_prefix=config.comparator_api_key_prefix,
            headers=config.comparator_api_headers,
            response_field=config.comparator_api_response_field,
            extra_body=config.comparator_api_extra_body,
            max_n_per_request=config.comparator_api_max_n_per_request,
            http=HttpOptions(timeout=config.comparator_api_timeout),
            num_candidates=count,
        )
    else:
        comparator = CurrentComparator(num_candidates=count)
    # a centralized team's comparator already answers its one joint prompt
    if config.comparator_generation_mode == "centralized" and config.collaboration_mode != "centralized":
        return CentralizedComparator(comparator, adapter, config.comparator_centralized_agent_index)
    return comparator


def actor_critic(config: Any) -> bool:
    """Whether the config trains with a critic (MARLHF's ``maac`` / ``iac``), not a group baseline."""
    return getattr(config, "rl_algorithm", None) in ("maac", "iac")


def critic_sources(config: Any, critic_model: Any = None, critics: Any = None) -> Any:
    """The critic backbone(s) the reference's arguments name: ``critics`` (``maac``: one;
    ``iac``: one per agent, with ``use_separate_critic``), else ``critic_model``, else
    ``critic_model_name`` (``None``: the agents' own models)."""
    if critics is None:
        return critic_model if critic_model is not None else config.critic_model_name
    require(
        isinstance(critics, (list, tuple)) and len(critics) > 0,
        "critics must be a non-empty sequence of critic models or names.",
    )
    require(
        config.rl_algorithm != "iac" or config.use_separate_critic,
        "critics can only be provided when use_separate_critic=True.",
    )
    if critic_model is not None:
        require(
            all(isinstance(c, str) and c == critic_model for c in critics),
            f"critic_model and critics conflict: {critic_model!r} != {list(critics)!r}.",
        )
    if config.rl_algorithm == "maac":
        require(len(critics) == 1, f"critics length ({len(critics)}) must match 1 critic.")
        return critics[0]
    return list(critics)


def critic_for(config: Any, critic_model: Any = None, critics: Any = None) -> Optional[Critic]:
    """The critic of ``maac`` (``SharedCritic``) or ``iac`` (``IndividualCritics``); ``None`` for the group baselines."""
    if config.rl_algorithm in GROUP_BASELINES:
        return None
    model_name = critic_sources(config, critic_model, critics)
    common = dict(
        critic_type=config.critic_type,
        learning_rate=config.critic_learning_rate,
        value_loss_coef=config.value_loss_coef,
    )
    if config.rl_algorithm == "maac":
        devices = _devices(config.critic_devices)
        devices = devices[0] if isinstance(devices, list) else devices  # one shared critic: one device
        return SharedCritic(
            model_name=model_name,
            critic_value_head_hidden_dim=config.critic_value_head_hidden_dim,
            devices=devices,
            **common,
        )
    if not config.use_separate_critic:
        return IndividualCritics(
            use_separate_critic=False,
            value_clip_range=config.value_clip_range,
            value_head_hidden_dim=config.value_head_hidden_dim,
            **common,
        )
    return IndividualCritics(
        model_name=model_name,
        use_separate_critic=True,
        value_clip_range=config.value_clip_range,
        critic_value_head_hidden_dim=config.critic_value_head_hidden_dim,
        devices=_devices(config.critic_devices),
        **common,
    )
