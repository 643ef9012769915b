"""An evaluation handed to its observers: the joint samples a team module's evaluation drew, and
the callbacks that read them and name their own metrics.

A team module records every evaluation item, each role's prompt and completion, the task reward
(per turn, and the return) and what the reward reported on each answer (:class:`EvaluationSamples`).
When the evaluation ends it keeps this process's samples as ``evaluated_samples`` (what
:class:`~comlrl_lightning.callbacks.SamplesLog` reads after it), and hands the samples of every
process to each :class:`EvaluationObserver` among the Trainer's callbacks, once; each returns its
own ``{key: number}``, which the module logs as ``eval/<key>`` beside ``eval/turn_1/reward_mean``
(``test/<key>`` while testing). Observers only read: nothing outside the module writes into it.
:class:`EvaluationMetricsCallback` is the observer of a plain function; the seed API builds one
from the reference (CoMLRL)'s ``eval_logger`` + ``eval_aggregator`` or ``metrics_callback``. A
policy-gradient module's ``rollout_metrics`` does the same for each update's rollouts
(:class:`RolloutSamples`), logged under the returned keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import torch
from lightning.pytorch import Callback
from torchmetrics import Metric

from comlrl_lightning.errors import DataError
from comlrl_lightning.runtime.distributed import gather_objects
from comlrl_lightning.tasks.centralized_task import parse_roles


@dataclass
class EvaluationSamples:
    """One evaluation's joint samples, item by item.

    Attributes:
        items: the evaluation items.
        role_prompts: ``role_prompts[k][r]``: role ``r``'s prompt for item ``k`` (as its formatter built it).
        completions: ``completions[k][r]``: role ``r``'s completion (a centralized team's joint
            completion split into roles; ``""`` for a role it could not split).
        rewards: the processed task reward of each item's joint sample (a multi-turn task's: the return).
        earlier_turns: ``earlier_turns[k][t][r]``: with several turns, role ``r``'s completion at turn
            ``t`` before the last (``completions[k]`` holds the last turn's); empty lists for one turn.
        turn_rewards: ``turn_rewards[k][t]``: the processed reward of item ``k``'s joint answer at turn
            ``t`` (one entry per turn its trajectory reached; one turn: ``[rewards[k]]``).
        num_turns: the task's turns (``H``; a trajectory may stop before its last).
        reports: ``reports[k][t]``: what the reward reported on item ``k``'s joint answer at turn ``t``
            (e.g. the coding reward's :class:`~comlrl_lightning.tasks.coding.reward.CodeScore` with
            its test report; ``None`` where the reward reports nothing beside its value).
    """

    items: List[Dict[str, Any]] = field(default_factory=list)
    role_prompts: List[List[str]] = field(default_factory=list)
    completions: List[List[str]] = field(default_factory=list)
    rewards: List[float] = field(default_factory=list)
    earlier_turns: List[List[List[str]]] = field(default_factory=list)
    turn_rewards: List[List[float]] = field(default_factory=list)
    num_turns: int = 1
    reports: List[List[Any]] = field(default_factory=list)

    def add(
        self,
        task: Any,
        items: Sequence[Dict[str, Any]],
        texts: Sequence[Sequence[str]],
        rewards: Sequence[float],
        earlier_turns: Optional[Sequence[Sequence[Sequence[str]]]] = None,
        turn_rewards: Optional[Sequence[Sequence[float]]] = None,
        reports: Optional[Sequence[Sequence[Any]]] = None,
    ):
        """Record ``items`` with ``texts[k]`` (each agent's completion for item ``k``; a multi-turn
        task's last turn, its earlier turns in ``earlier_turns[k]``), their rewards (a multi-turn
        task's returns), each turn's reward (``None``: one turn, whose reward is ``rewards[k]``) and
        what the reward reported at each turn (``None``: nothing)."""
        earlier = earlier_turns if earlier_turns is not None else [[] for _ in items]
        per_turn = turn_rewards if turn_rewards is not None else [[reward] for reward in rewards]
        reported = reports if reports is not None else [[None] * len(turns) for turns in per_turn]
        declared = getattr(getattr(task, "turns", None), "num_turns", 1)  # a task of one's own may not say
        self.num_turns = max(self.num_turns, declared, *(len(before) + 1 for before in earlier))
        for item, agent_texts, reward, before, turns, said in zip(items, texts, rewards, earlier, per_turn, reported):
            if task.centralized:
                roles = parse_roles(task.adapter, agent_texts[0], item, task.num_roles)
                self.role_prompts.append(task.role_prompts(item))
                self.completions.append(list(roles) if roles is not None else [""] * task.num_roles)
            else:
                self.role_prompts.append([str(prompt) for prompt in task.agent_prompts(item)])
                self.completions.append(list(agent_texts))
            self.items.append(item)
            self.rewards.append(float(reward))
            self.earlier_turns.append([list(turn) for turn in before])
            self.turn_rewards.append([float(value) for value in turns])
            self.reports.append(list(said))

    def turns_of(self, role: int) -> List[List[str]]:
        """Role ``role``'s completions of every turn, item by item: ``[k] -> [turn 1, ..., last turn]``."""
        earlier = self.earlier_turns + [[] for _ in range(len(self.completions) - len(self.earlier_turns))]
        return [[turn[role] for turn in before] + [last[role]] for before, last in zip(earlier, self.completions)]

    def report_after_turn(self, k: int, turn: int) -> Any:
        """What the reward reported on item ``k``'s answer after turn ``turn`` (0-based; a trajectory
        that ended earlier keeps its last answer's report); ``None`` when it reported nothing."""
        said = self.reports[k] if k < len(self.reports) else []
        return said[min(turn, len(said) - 1)] if said else None

    def merged(self, world: int) -> "EvaluationSamples":
        """Every process's samples, in rank order (the same on every rank)."""
        merged = EvaluationSamples()
        for part in gather_objects(self, world):
            merged.items += part.items
            merged.role_prompts += part.role_prompts
            merged.completions += part.completions
            merged.rewards += part.rewards
            merged.earlier_turns += part.earlier_turns
            merged.turn_rewards += part.turn_rewards
            merged.reports += part.reports
            merged.num_turns = max(merged.num_turns, part.num_turns)
        return merged


@dataclass
class RolloutSamples:
    """A policy update's samples, item by item: ``G`` joint samples per item.

    Attributes:
        items: the task items of the update.
        role_prompts: ``role_prompts[k][r]``: role ``r``'s prompt for item ``k``.
        completions: ``completions[k][r][g]``: role ``r``'s completion in joint sample ``g``.
        rewards: ``rewards[k][g]``: the joint sample's reward (what the policy learns from).
        returns: ``returns[k][r][g]``: role ``r``'s return after the reference-KL penalty.
    """

    items: List[Dict[str, Any]]
    role_prompts: List[List[str]]
    completions: List[List[List[str]]]
    rewards: List[List[float]]
    returns: List[List[List[float]]]

    @classmethod
    def of_evaluation(cls, samples: EvaluationSamples) -> "RolloutSamples":
        """An evaluation's samples as rollouts: one joint sample per item, its return its reward."""
        return cls(
            items=list(samples.items),
            role_prompts=list(samples.role_prompts),
            completions=[[[text] for text in texts] for texts in samples.completions],
            rewards=[[reward] for reward in samples.rewards],
            returns=[[[reward]] * len(texts) for texts, reward in zip(samples.completions, samples.rewards)],
        )

    @classmethod
    def of_update(cls, task: Any, items: Sequence[Dict[str, Any]], texts, rewards, returns) -> "RolloutSamples":
        """From a policy step: ``texts[agent][k][g]``, ``rewards`` ``[items, G]``, ``returns`` ``[agents, items, G]``
        (a centralized team's joint completions split into roles, each role given the joint return)."""
        record = cls([], [], [], [], [])
        for k, item in enumerate(items):
            if task.centralized:
                split = [parse_roles(task.adapter, text, item, task.num_roles) for text in texts[0][k]]
                roles = [[(parts or [""] * task.num_roles)[r] for parts in split] for r in range(task.num_roles)]
                record.role_prompts.append(task.role_prompts(item))
                record.returns.append([[float(v) for v in returns[0][k]]] * task.num_roles)
            else:
                roles = [list(agent[k]) for agent in texts]
                record.role_prompts.append([str(prompt) for prompt in task.agent_prompts(item)])
                record.returns.append([[float(v) for v in agent[k]] for agent in returns])
            record.items.append(item)
            record.completions.append(roles)
            record.rewards.append([float(v) for v in rewards[k]])
        return record


EvaluationMetrics = Callable[[EvaluationSamples], Mapping[str, Any]]
"""A function of an evaluation's samples: samples in, ``{key: number}`` out."""


class EvaluationObserver(Callback):
    """A callback that reads every evaluation's samples and names its own metrics.

    The team module calls :meth:`on_evaluation_samples` once per evaluation (fit's evaluations,
    ``validate``, ``test``, the seed API's ``evaluate()``) with the samples of every process, on
    every process, and logs what it returns as ``eval/<key>`` (``test/<key>`` while testing). An
    observer never writes into the module or the samples.
    """

    def on_evaluation_samples(self, trainer: Any, pl_module: Any, samples: EvaluationSamples) -> Mapping[str, Any]:
        """``{key: number}`` of one evaluation's samples (nothing by default)."""
        return {}


class EvaluationMetricsCallback(EvaluationObserver):
    """The observer of a plain function: ``metrics(samples)`` logged as ``eval/<key>``.

    Args:
        metrics: samples in, ``{key: number}`` out (e.g. the reference's ``eval_logger`` +
            ``eval_aggregator`` as the seed API wraps them).
    """

    def __init__(self, metrics: EvaluationMetrics) -> None:
        self.metrics = metrics

    def on_evaluation_samples(self, trainer: Any, pl_module: Any, samples: EvaluationSamples) -> Mapping[str, Any]:
        return self.metrics(samples)


def evaluation_observers(trainer: Any) -> List[EvaluationObserver]:
    """The Trainer's callbacks that observe evaluations, in the Trainer's order (none without a Trainer)."""
    return [
        callback for callback in getattr(trainer, "callbacks", None) or [] if isinstance(callback, EvaluationObserver)
    ]


def domain_metrics(
    function: Callable[[Any], Mapping[str, Any]], samples: Any, prefix: str = "eval/"
) -> Dict[str, float]:
    """``{"<prefix><key>": float(value)}`` of what ``function(samples)`` returns; a value that is not a
    finite number is an error naming the key (a silently dropped metric would go unnoticed)."""
    if not samples.items:
        return {}
    returned = function(samples)
    if not isinstance(returned, Mapping):
        raise DataError(f"evaluation metrics must return a dict of numbers (got {type(returned).__name__}).")
    metrics = {}
    for key, value in returned.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise DataError(f"evaluation metric {key!r} is not a number (got {value!r}).") from None
        if not math.isfinite(number):
            raise DataError(f"evaluation metric {key!r} is not finite (got {number}).")
        metrics[f"{prefix}{key}"] = number
    return metrics


def renew_inference_states(module: torch.nn.Module) -> None:
    """Every torchmetrics state of ``module`` that is an inference tensor becomes an ordinary copy
    (same values).

    A validation run in inference mode (Lightning's default) leaves the states it reset as
    inference tensors, which no update outside inference mode may change in place: a later
    ``fit`` (whose validation runs under ``no_grad``) would fail on its first evaluation.
    Called outside inference mode at every ``setup``, so any order of runs works.
    """
    for metric in module.modules():
        if not isinstance(metric, Metric):
            continue
        for name, value in metric.metric_state.items():
            if isinstance(value, torch.Tensor) and value.is_inference():
                setattr(metric, name, value.clone())
            elif isinstance(value, list) and any(isinstance(v, torch.Tensor) and v.is_inference() for v in value):
                setattr(metric, name, [v.clone() if isinstance(v, torch.Tensor) else v for v in value])


RolloutMetrics = Callable[[RolloutSamples], Dict[str, Any]]
"""What a policy-gradient module's ``rollout_metrics`` is: a step's samples in, ``{key: number}`` out."""


__all__ = [
    "EvaluationMetrics",
    "EvaluationMetricsCallback",
    "EvaluationObserver",
    "EvaluationSamples",
    "RolloutMetrics",
    "RolloutSamples",
    "domain_metrics",
    "evaluation_observers",
    "renew_inference_states",
]
