"""The reference (CoMLRL)'s evaluation callbacks as evaluation observers of a seed-API run.

* ``eval_logger`` + ``eval_aggregator`` (MADPO and the MAGRPO-family MARLHF): called once per
  evaluation as ``eval_aggregator(eval_logger(agent_completions_turns=..., batch_items=...,
  prompts=...), num_turns=H)``; ``agent_completions_turns[i][k]`` is agent ``i``'s list of turn
  completions for item ``k`` (one per turn its trajectory had), ``prompts[k]`` is
  ``item.get("prompt", "")``, ``H`` the longest trajectory's turns (1 for a single-turn task).
* ``metrics_callback`` (MARLHF with ``maac`` / ``iac``): called once per item with that item's
  rollout samples (``agent_idx``, ``prompt``, ``completion``, ``reward``, ``returns``,
  ``metadata`` with ``turn_idx``, ``generation_idx`` and ``batch_item``): in an update, ``G`` per
  agent, logged under the returned keys; in an evaluation during training, one per agent, logged
  as ``eval/<key>``. Each returned key is averaged over the items.

As in the reference, the MAGRPO-family path ignores ``metrics_callback``, the actor-critic path's
evaluations ignore ``eval_logger`` / ``eval_aggregator``, and ``evaluate()`` always uses the latter.
Each is an :class:`~comlrl_lightning.modules.evaluation_metrics.EvaluationMetricsCallback` on the
Trainer that runs (:meth:`ReferenceCallbacks.observers`): it reads the module's evaluation samples and
never writes into the module.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import WandbLogger

from comlrl_lightning.errors import ConfigurationTypeError
from comlrl_lightning.modules.evaluation_metrics import EvaluationMetricsCallback, EvaluationSamples, RolloutSamples
from comlrl_lightning.runtime.compat import wandb_run_active
from comlrl_lightning.validation import OptionError, at_least, require


class EvalLoggerMetrics:
    """``eval_aggregator(eval_logger(...), num_turns=H)`` over one evaluation's samples (every turn of each)."""

    def __init__(self, eval_logger: Callable[..., Any], eval_aggregator: Callable[..., Any]) -> None:
        self.eval_logger, self.eval_aggregator = eval_logger, eval_aggregator

    def __call__(self, samples: EvaluationSamples) -> Dict[str, Any]:
        roles = len(samples.completions[0])
        turns = [samples.turns_of(role) for role in range(roles)]
        prompts = [item.get("prompt", "") for item in samples.items]
        detailed = self.eval_logger(agent_completions_turns=turns, batch_items=list(samples.items), prompts=prompts)
        metrics = self.eval_aggregator(detailed, num_turns=max(len(per_item) for per_item in turns[0]))
        if not isinstance(metrics, Mapping):
            raise ConfigurationTypeError(
                f"eval_aggregator must return a mapping of metric names to numbers (it returned {type(metrics).__name__})."
            )
        return dict(metrics)


@dataclass
class RolloutSample:
    """One agent's sample as the reference's actor-critic ``metrics_callback`` receives it."""

    agent_idx: int
    prompt: str
    completion: str
    reward: torch.Tensor
    returns: torch.Tensor
    metadata: Dict[str, Any] = field(default_factory=dict)


def item_rollouts(samples: RolloutSamples, k: int) -> List[RolloutSample]:
    """Item ``k``'s rollouts in the reference's order: agent by agent, generation by generation."""
    rollouts = []
    for agent, texts in enumerate(samples.completions[k]):
        for g, text in enumerate(texts):
            rollouts.append(
                RolloutSample(
                    agent_idx=agent,
                    prompt=samples.role_prompts[k][agent],
                    completion=text,
                    reward=torch.tensor([samples.rewards[k][g]], dtype=torch.float32),
                    returns=torch.tensor([samples.returns[k][agent][g]], dtype=torch.float32),
                    metadata={"turn_idx": 0, "generation_idx": g, "batch_item": samples.items[k]},
                )
            )
    return rollouts


class RolloutMetrics:
    """``metrics_callback(rollouts)`` per item, each key averaged over the items (values that are not
    numbers are skipped, as the reference skips them). Takes an update's :class:`RolloutSamples`, or
    an evaluation's samples (one joint sample per item)."""

    def __init__(self, metrics_callback: Callable[[List[RolloutSample]], Dict[str, Any]]) -> None:
        self.metrics_callback = metrics_callback

    def __call__(self, samples: Union[RolloutSamples, EvaluationSamples]) -> Dict[str, float]:
        if isinstance(samples, EvaluationSamples):
            samples = RolloutSamples.of_evaluation(samples)
        values: Dict[str, List[float]] = defaultdict(list)
        for k in range(len(samples.items)):
            returned = self.metrics_callback(item_rollouts(samples, k))
            for key, value in (returned if isinstance(returned, dict) else {}).items():
                try:
                    values[str(key)].append(float(value))
                except (TypeError, ValueError):
                    continue
        return {key: sum(found) / len(found) for key, found in values.items() if found}


class ReferenceCallbacks:
    """The reference's ``eval_logger`` + ``eval_aggregator`` and ``metrics_callback``, routed as it routes them.

    ``evaluate()`` and the evaluations of MADPO and the MAGRPO-family MARLHF use the first pair; a
    ``maac`` / ``iac`` run's evaluations and its updates' rollouts use ``metrics_callback``.
    ``eval_logger`` without ``eval_aggregator`` (or the reverse) is refused: the reference would
    silently log nothing.
    """

    def __init__(self, eval_logger: Any = None, eval_aggregator: Any = None, metrics_callback: Any = None) -> None:
        for name, value in (
            ("eval_logger", eval_logger),
            ("eval_aggregator", eval_aggregator),
            ("metrics_callback", metrics_callback),
        ):
            require(value is None or callable(value), f"{name} must be a callable.")
        if (eval_logger is None) != (eval_aggregator is None):
            given, missing = (
                ("eval_logger", "eval_aggregator") if eval_aggregator is None else ("eval_aggregator", "eval_logger")
            )
            raise OptionError(
                f"{given} needs {missing} too: the reference logs their metrics only when both are given."
            )
        self.logger_metrics = EvalLoggerMetrics(eval_logger, eval_aggregator) if eval_logger is not None else None
        self.rollout_metrics = RolloutMetrics(metrics_callback) if metrics_callback is not None else None

    def install(self, module: Any, actor_critic: bool) -> None:
        """Set a ``maac`` / ``iac`` module's ``rollout_metrics`` (its updates' metrics; evaluations are
        observed by :meth:`observers`)."""
        if actor_critic:
            module.rollout_metrics = self.rollout_metrics

    def observers(self, actor_critic: bool) -> List[EvaluationMetricsCallback]:
        """The callbacks that log ``eval/<key>`` at a ``train()``'s evaluations: ``metrics_callback``'s
        for ``maac`` / ``iac``, else ``eval_logger`` + ``eval_aggregator``'s (none when not given)."""
        chosen = self.rollout_metrics if actor_critic else self.logger_metrics
        return [EvaluationMetricsCallback(chosen)] if chosen is not None else []


def evaluate_now(trainer: Any, num_eval_samples: Optional[int] = None) -> Dict[str, float]:
    """A seed-API trainer's ``evaluate()``: a validation of its module on its data module (at most
    ``num_eval_samples`` items), its metrics logged to the loggers of the last ``train()`` (if any) and returned."""
    datamodule = evaluation_data(trainer.datamodule, num_eval_samples)
    # the reference's evaluate() always logs eval_logger + eval_aggregator's metrics
    observers = trainer.reference_callbacks.observers(actor_critic=False)
    # no inference mode: tensors made under it (the team's buffers, metric states) could not be trained after
    validator = Trainer(
        accelerator="auto",
        devices=1,
        default_root_dir=str(trainer.output_dir),  # an iterative data module's folders: the run's, not the cwd
        callbacks=observers,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        inference_mode=False,
    )
    results = validator.validate(trainer.module, datamodule, verbose=False)
    metrics = {key: float(value) for key, value in (results[0] if results else {}).items()}
    if trainer.trainer is not None and metrics:
        log_after_training(trainer.trainer, metrics)
    return metrics


def evaluation_data(datamodule: Any, num_eval_samples: Optional[int]) -> Any:
    """The data module an ``evaluate(num_eval_samples)`` validates with: ``datamodule`` itself, or
    for a count a shallow copy that evaluates its first ``num_eval_samples`` items (``datamodule``
    is never changed)."""
    if num_eval_samples is None:
        return datamodule
    at_least("num_eval_samples", num_eval_samples, 0)
    counted = copy.copy(datamodule)
    counted.eval_num_samples = num_eval_samples
    return counted


def log_after_training(trainer: Trainer, metrics: Dict[str, float]) -> None:
    """Log ``metrics`` to a finished ``fit``'s loggers at its last step (a W&B run already finished is skipped)."""
    step = max(trainer.global_step - 1, 0)
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and not wandb_run_active(logger):
            continue
        logger.log_metrics(metrics, step=step)
        logger.save()


__all__ = [
    "EvalLoggerMetrics",
    "ReferenceCallbacks",
    "RolloutMetrics",
    "RolloutSample",
    "evaluate_now",
    "evaluation_data",
    "item_rollouts",
    "log_after_training",
]
