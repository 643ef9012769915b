"""The seed API's constructor arguments: which the reference (CoMLRL) has that are not taken here, and why.

A keyword the reference does not have is a ``TypeError`` (as Python gives it); one it has that a
trainer here does not take (MARLHF's ``external_transition``) is an error with the reason; ``args``
of another trainer's kind is refused. Nothing is ever silently ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping

from comlrl_lightning.comparators.credentials import check_config_has_no_key
from comlrl_lightning.errors import ConfigurationTypeError
from comlrl_lightning.tasks.turns import Turns
from comlrl_lightning.trainers.configs import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl_lightning.validation import OptionError, require

MARLHF_SINGLE_TURN = (
    "MARLHF trains single-turn here (num_turns must be 1); multi-turn preference training is MADPO's "
    "(MADPOTrainer, MADPOIterTrainer)"
)
"""Why the MARLHF trainers refuse ``external_transition`` (the MADPO trainers take it)."""

MARLHF_ONLY = ("metrics_callback", "critic_model", "critics")
"""Keywords only the reference's MARLHF trainers have."""

CONFIG_KINDS = (MADPOConfig, MARLHFConfig, MADPOIterConfig, MARLHFIterConfig)


def check_arguments(trainer: str, config_class: type, args: Any, marlhf: bool, given: Dict[str, Any]) -> None:
    """Refuse ``args`` of another kind than ``config_class``, keywords in ``given`` the reference's
    ``trainer`` does not have, and a given ``external_transition`` for MARLHF."""
    # MARLHFConfig and the iterative configs derive from MADPOConfig: each trainer takes its own kind only
    other_kinds = tuple(set(CONFIG_KINDS) - set(config_class.__mro__))
    require(
        isinstance(args, config_class) and not isinstance(args, other_kinds),
        f"args must be a {config_class.__name__} (got {type(args).__name__}).",
    )
    for name, value in given.items():
        if name in MARLHF_ONLY and not marlhf or name not in (*MARLHF_ONLY, "external_transition"):
            raise ConfigurationTypeError(f"{trainer}() got an unexpected keyword argument {name!r}")
        if name == "external_transition" and value is not None and marlhf:
            raise OptionError(f"{name} is not supported by {trainer}: {MARLHF_SINGLE_TURN}.")


def turns_for(config: MADPOConfig, external_transition: Any = None) -> Turns:
    """The task's :class:`~comlrl_lightning.tasks.turns.Turns` from the config's ``num_turns``, ``discount``
    and ``early_termination_threshold`` and the constructor's ``external_transition``."""
    if config.num_turns == 1:
        return Turns(external_transition=external_transition)
    return Turns(
        num_turns=config.num_turns,
        external_transition=external_transition,
        discount=config.discount,
        early_termination_threshold=config.early_termination_threshold,
    )


def check_argument_types(num_agents: Any, wandb_config: Any, model_config: Any) -> None:
    """The constructor's plain arguments are of their kind: ``num_agents`` an integer,
    ``wandb_config`` and ``model_config`` mappings (or ``None``); a
    :class:`~comlrl_lightning.errors.ConfigurationTypeError` naming the argument otherwise (never its value)."""
    if isinstance(num_agents, bool) or not isinstance(num_agents, int):
        raise ConfigurationTypeError(f"num_agents must be an integer (got {type(num_agents).__name__}).")
    for name, value in (("wandb_config", wandb_config), ("model_config", model_config)):
        if value is not None and not isinstance(value, Mapping):
            raise ConfigurationTypeError(f"{name} must be a mapping (a dict) or None (got {type(value).__name__}).")


def refuse_saved_keys(
    args: Any, wandb_config: Any, model_config: Any, agent_model: Any, agents: Any, given: Mapping[str, Any]
) -> None:
    """Refuse a run whose saved configuration (W&B, ``hparams``, checkpoints) would hold an API key's
    value: in the config, ``wandb_config``, ``model_config`` (a special token, model kwargs) or the
    model names."""
    saved: Dict[str, Any] = dict(args=dataclasses.asdict(args), wandb_config=dict(wandb_config or {}))
    saved.update(model_config=model_config or {}, agent_model=agent_model, agents=list(agents or []), **given)
    check_config_has_no_key(saved)


__all__ = ["MARLHF_ONLY", "check_argument_types", "check_arguments", "refuse_saved_keys", "turns_for"]
