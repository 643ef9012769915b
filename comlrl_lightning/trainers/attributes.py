"""The reference (CoMLRL)'s public trainer attributes on the seed API's trainers.

A CoMLRL script reads ``trainer.agents``, ``trainer.tokenizers``, ``trainer.tokenizer``,
``trainer.num_agents``, ``trainer.formatters``, ``trainer.reward_func``, ``trainer.reward_processor``,
``trainer.env_step`` and ``trainer.model_name`` (MARLHF: ``trainer.reward_model``,
``trainer.reward_tokenizer`` and ``trainer.critics``). Here they are views of the Lightning parts
the trainer built (:attr:`module`, :attr:`datamodule`), never copies: a model changed through
``trainer.agents[i]`` is the model that trains.

The reference loads every model in its constructor; here the models load on first need (the
first read of :attr:`agents`, or ``train()``), so a bad option fails before any download. The
tokenizers load without the models.
"""

from __future__ import annotations

import os
from typing import Any, Callable, List, Optional

from torch import nn

from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.tasks.task import Task
from comlrl_lightning.trainers.configs import MADPOConfig
from comlrl_lightning.trainers.environment_steps import EnvironmentSteps
from comlrl_lightning.validation import require


def identity(value: float) -> float:
    """The reference's default reward processor: ``x -> x``."""
    return value


def reference_task(datamodule: Any, module: Any, tokenizer: Any = None) -> Task:
    """The task of the data module's formatters and reward for the team's roles, built (so checked)
    in the trainer's constructor as the reference builds its formatters; a list of tokenizers must
    have one per agent."""
    if isinstance(tokenizer, (list, tuple)):  # a centralized team's one tokenizer is checked before
        require(len(tokenizer) == module.num_agents, "tokenizers length must match agents.")
    return datamodule.task_options.build(module.num_roles)


class ReferenceAttributes:
    """The reference trainers' public attributes, read from the Lightning parts.

    Needs ``self.module`` (a team module), ``self.task`` (the :class:`Task` built in the
    constructor, which checked the formatters and the reward function), ``self.environment_steps``
    (the :class:`EnvironmentSteps` callback ``train()`` runs with) and ``self.args`` (the config).
    """

    module: Any
    args: MADPOConfig
    trainer: Any
    task: Task
    environment_steps: EnvironmentSteps
    model_source: Any = None

    @property
    def agents(self) -> List[nn.Module]:
        """The team's agent models, one per agent (a centralized team: its one model); they load on first read."""
        return list(self.module.team.agents)

    @property
    def tokenizers(self) -> List[Any]:
        """Each agent's tokenizer (a tokenizer given once is every agent's, as the reference)."""
        return list(self.module.agent_tokenizers)

    @property
    def tokenizer(self) -> Any:
        """Agent 0's tokenizer."""
        return self.tokenizers[0]

    @property
    def num_agents(self) -> int:
        """Agents of the team: ``len(agents)`` when given, else ``num_agents`` (a centralized team: 1)."""
        return self.module.num_agents

    @property
    def formatters(self) -> List[Callable[[dict], Any]]:
        """One prompt builder per agent (``item -> prompt``); a centralized team's one builds the joint prompt."""
        if not self.module.collaboration.centralized:
            return list(self.task.formatters)
        joint = self.module.collaboration.team_task(self.task)
        return [lambda item: joint.prompts(item)[0]]

    @property
    def reward_func(self) -> Callable[..., Any]:
        """The task reward function (given as a callable or an import path)."""
        return self.task.oracle.reward_func

    @property
    def reward_processor(self) -> Callable[[float], float]:
        """The reward processor (the identity when none was given, as the reference)."""
        return self.task.oracle.reward_processor or identity

    @property
    def env_step(self) -> int:
        """The reference's environment-step counter, the step of its W&B metrics: MADPO adds
        ``environment_steps_per_pair`` per trained pair (``use_environment_step``), MARLHF
        ``num_generations`` per task item of its policy phase."""
        return self.environment_steps.env_step

    @property
    def model_name(self) -> Optional[str]:
        """The model source's name: ``agent_model`` (or agent 0's name), or a model object's
        ``name_or_path`` / ``config.model_type``, as the reference infers it."""
        source = self.model_source
        if isinstance(source, (str, os.PathLike)):
            return str(source) if source != EMBEDDED else EMBEDDED
        return getattr(source, "name_or_path", None) or getattr(getattr(source, "config", None), "model_type", None)


class MARLHFAttributes(ReferenceAttributes):
    """MARLHF's: the joint reward model and its tokenizer, and the critics."""

    @property
    def reward_model(self) -> Optional[nn.Module]:
        """The joint reward model once fitted, as the reference keeps it: ``None`` before the first
        fit, and for an iterative run that scores with the task reward, ``None`` between rounds (its
        reward model lives for one round)."""
        if getattr(self.module, "fitted_round", None) is None:
            return None
        if getattr(self.args, "preference_scoring_reward", "reward_model") == "task" and not self._training():
            return None
        return self.module.reward_model

    def _training(self) -> bool:
        return self.trainer is not None and self.trainer.training

    @property
    def reward_tokenizer(self) -> Any:
        """The reward model's tokenizer (``None`` before the first fit)."""
        return None if self.reward_model is None else self.module.scorer.tokenizer

    @property
    def critics(self) -> List[nn.Module]:
        """The critic networks of ``maac`` (one, shared) or ``iac`` (one per agent: a separate critic
        model, or the value head on the agent); empty for the group baselines and before ``train()``."""
        critic = getattr(self.module, "critic", None)
        if critic is None:
            return []
        if getattr(critic, "model", None) is not None:
            return [critic.model]
        return list(getattr(critic, "models", None) or getattr(critic, "heads", None) or [])


__all__ = ["MARLHFAttributes", "ReferenceAttributes", "identity", "reference_task"]
