"""What a team module samples and scores when it evaluates: one joint answer per evaluation item
(:meth:`TurnEvaluation.evaluate_items`), or for a multi-turn task one joint trajectory, logged turn by turn.

With the task's ``num_turns = H > 1`` the team module evaluates each item with one joint trajectory
of up to ``H`` turns, sampled as collection samples them (the same transition, early stop and
return), and logs ``eval/turn_<t>/reward_mean`` (the mean task reward of turn ``t`` over the
trajectories that reached it, ``t = 1..H``) and ``eval/return_mean`` (the mean return of the whole
trajectory, :meth:`~comlrl_lightning.data.turns.Turns.trajectory_return`), also under the reference's
name ``eval/turn_1/expected_return`` (the expected return from turn 1 on). A single-turn task never
comes here.

**The headline** of an evaluation (the line printed, the reward curve, ``initial_eval_reward`` and
``final_eval_reward``) is one of these metrics, named as logged (:func:`headline_key`): with one turn
``eval/turn_1/reward_mean`` (turn 1's reward is the return), with several ``eval/return_mean``.
"""

from __future__ import annotations

from typing import Any, ContextManager, Dict, List, Optional, Protocol, Sequence, Tuple

import torch

from comlrl_lightning.data.contract import optional_data_side
from comlrl_lightning.data.oracle import score_requests
from comlrl_lightning.data.trajectories import sample_joint, sample_trajectories, team_context_check, team_sampler
from comlrl_lightning.modules.reward_reports import ReportRecorder, reporting_oracle
from comlrl_lightning.runtime.compat import attached_trainer
from comlrl_lightning.runtime.distributed import gather_objects
from comlrl_lightning.runtime.rng import RandomStream

TURN_1_KEY = "eval/turn_1/reward_mean"
RETURN_KEY = "eval/turn_1/expected_return"
"""The reference's name of the mean return (the same number as :data:`RETURN_MEAN_KEY`)."""
RETURN_MEAN_KEY = "eval/return_mean"


def headline_key(task: Any) -> str:
    """The metric an evaluation of ``task`` reports first: ``eval/turn_1/reward_mean`` for one turn
    (or no task yet), ``eval/return_mean`` (the mean return) for several turns, where turn 1's
    reward is not the return."""
    return RETURN_MEAN_KEY if task is not None and task.turns.multi else TURN_1_KEY


def turn_sums(per_item: Sequence[Sequence[float]]) -> List[Tuple[float, int]]:
    """``(sum, count)`` of every turn's rewards over the trajectories that reached it."""
    totals: List[Tuple[float, int]] = []
    for rewards in per_item:
        for turn, reward in enumerate(rewards):
            if turn == len(totals):
                totals.append((0.0, 0))
            total, count = totals[turn]
            totals[turn] = (total + float(reward), count + 1)
    return totals


def turn_means(parts: Sequence[Sequence[Tuple[float, int]]]) -> Dict[str, float]:
    """``eval/turn_<t>/reward_mean`` from every process's :func:`turn_sums`."""
    metrics: Dict[str, float] = {}
    for turn in range(max((len(part) for part in parts), default=0)):
        total = sum(part[turn][0] for part in parts if len(part) > turn)
        count = sum(part[turn][1] for part in parts if len(part) > turn)
        metrics[f"eval/turn_{turn + 1}/reward_mean"] = total / max(count, 1)
    return metrics


def turn_reports(recorder: ReportRecorder, turn_rewards: Sequence[Sequence[float]]) -> List[List[Any]]:
    """``reports[k][t]`` of trajectories scored turn by turn (every trajectory that reached turn ``t``
    in one oracle call, in item order: :func:`~comlrl_lightning.data.trajectories.sample_trajectories`)
    from the recorder's reports in scoring order; ``turn_rewards[k]`` says which turns item ``k`` reached."""
    reports: List[List[Any]] = [[] for _ in turn_rewards]
    for turn in range(max((len(rewards) for rewards in turn_rewards), default=0)):
        reached = [k for k, rewards in enumerate(turn_rewards) if len(rewards) > turn]
        for k, report in zip(reached, recorder.take(len(reached))):
            reports[k].append(report)
    return reports


class _TeamModuleParts(Protocol):
    """What :class:`TurnEvaluation` reads of the team module it is mixed into."""

    generator: Any
    generation_settings: Any
    evaluation_record: Any
    eval_metrics: Any  # key -> torchmetrics MeanMetric (a ModuleDict)
    evaluated_turns: Optional[List[List[float]]]

    @property
    def team(self) -> Any: ...

    @property
    def device(self) -> torch.device: ...

    def generation_context(self) -> ContextManager[None]: ...

    def log(
        self,
        name: str,
        value: Any,
        *,
        on_step: Optional[bool] = None,
        on_epoch: Optional[bool] = None,
        batch_size: Optional[int] = None,
        sync_dist: bool = False,
    ) -> None: ...

    def sample_turns(
        self, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> Tuple[List[List[float]], List[float]]: ...

    def evaluate_turns(
        self: _TeamModuleParts, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> List[float]: ...


class TurnEvaluation:
    """A team module's evaluation samples: one joint answer per item, or trajectories and per-turn
    metrics for a multi-turn task."""

    evaluated_turns: Optional[List[List[float]]] = None
    """Per-turn rewards of every item evaluated outside the validation loop since the last summary."""

    @property
    def headline_metric(self) -> str:
        """The name of the metric this module's evaluations report first (:func:`headline_key` of the
        task of the data module it runs with)."""
        trainer = attached_trainer(self)  # type: ignore[arg-type]  # a mixin: the LightningModule's
        datamodule = optional_data_side(trainer) if trainer is not None else None
        return headline_key(getattr(datamodule, "task", None))  # a data module's task is None before setup

    def evaluate_items(
        self: _TeamModuleParts, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> List[float]:
        """Processed task reward of one joint sample per item, drawn from ``stream`` (a multi-turn
        task: the return of one joint trajectory per item, :meth:`evaluate_turns`)."""
        if task.turns.multi:
            return self.evaluate_turns(items, task, stream)
        prompts = [task.prompts(item) for item in items]
        sampler = team_sampler(self.generator, self.team, self.generation_settings, stream)
        with self.generation_context():
            joint = sample_joint(sampler, items, prompts, 1)  # one joint answer per item, as a round samples
        texts = [[c.text for c in per_item[0]] for per_item in joint]
        requests = [([[text] for text in texts[k]], prompts[k], item) for k, item in enumerate(items)]
        oracle, recorder = reporting_oracle(task.oracle)  # what the reward says of each answer, kept
        rewards = [processed[0] for _, processed in score_requests(oracle, requests)]
        if self.evaluation_record is not None:
            reports = [[report] for report in recorder.take(len(items))] if recorder is not None else None
            self.evaluation_record.add(task, items, texts, rewards, reports=reports)
        return rewards

    def sample_turns(
        self: _TeamModuleParts, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> Tuple[List[List[float]], List[float]]:
        """One joint trajectory per item: ``(per-turn rewards per item, returns)``, recorded as evaluation samples."""
        sampler = team_sampler(self.generator, self.team, self.generation_settings, stream)
        prompts = [task.prompts(item) for item in items]
        oracle, recorder = reporting_oracle(task.oracle)  # what the reward says of each answer, kept
        with self.generation_context():
            fits = team_context_check(self.team, self.generation_settings)
            sampled = sample_trajectories(
                sampler, oracle, task.turns, items, prompts, 1, lambda: self.team.tokenizers, context_check=fits
            )
        trajectories = [per_item[0] for per_item in sampled]
        returns = [task.turns.trajectory_return(t.rewards) for t in trajectories]
        turn_rewards = [list(t.rewards) for t in trajectories]
        if self.evaluation_record is not None:
            texts = [[c.text for c in t.completions[-1]] for t in trajectories]
            earlier = [[[c.text for c in turn] for turn in t.completions[:-1]] for t in trajectories]
            reports = turn_reports(recorder, turn_rewards) if recorder is not None else None
            self.evaluation_record.add(task, items, texts, returns, earlier, turn_rewards, reports)
        return turn_rewards, returns

    def evaluate_turns(
        self: _TeamModuleParts, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> List[float]:
        """The returns of one trajectory per item; the per-turn rewards wait for :meth:`turn_summary`."""
        per_turn, returns = self.sample_turns(items, task, stream)
        self.evaluated_turns = (self.evaluated_turns or []) + per_turn
        return returns

    def turn_summary(self, world: int, return_mean: float) -> Dict[str, float]:
        """Per-turn means of what :meth:`evaluate_turns` evaluated (every process's) and ``return_mean``
        (the mean of the returns it gave) as ``eval/return_mean``; nothing for one turn."""
        if self.evaluated_turns is None:
            return {}
        per_turn, self.evaluated_turns = self.evaluated_turns, None
        return {**turn_means(gather_objects(turn_sums(per_turn), world)), RETURN_MEAN_KEY: return_mean}

    def validate_turns(self: _TeamModuleParts, batch: List[Dict[str, Any]], task: Any, stream: RandomStream) -> None:
        """A validation step of a multi-turn task: turn 1's reward and the return in the module's exact
        metrics, later turns' rewards averaged over the trajectories that reached them."""
        per_turn, returns = self.sample_turns(batch, task, stream)
        if not batch:
            return
        values = {TURN_1_KEY: [rewards[0] for rewards in per_turn], RETURN_KEY: returns}
        for key, metric in self.eval_metrics.items():
            metric.update(torch.tensor(values[key], dtype=torch.float32, device=self.device))
            self.log(key, metric, on_step=False, on_epoch=True, batch_size=len(batch))
        # the return under its own name too: the same exact metric as the reference's name
        self.log(RETURN_MEAN_KEY, self.eval_metrics[RETURN_KEY], on_step=False, on_epoch=True, batch_size=len(batch))
        for turn in range(1, task.turns.num_turns):
            reached = [rewards[turn] for rewards in per_turn if len(rewards) > turn]
            if reached:
                value = torch.tensor(sum(reached) / len(reached), device=self.device)
                key = f"eval/turn_{turn + 1}/reward_mean"
                self.log(key, value, on_step=False, on_epoch=True, batch_size=len(reached), sync_dist=True)


__all__ = [
    "RETURN_KEY",
    "RETURN_MEAN_KEY",
    "TURN_1_KEY",
    "TurnEvaluation",
    "headline_key",
    "turn_means",
    "turn_reports",
    "turn_sums",
]
