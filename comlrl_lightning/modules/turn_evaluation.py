"""What a team module samples and scores when it evaluates (:class:`Evaluator`, an object the module
owns): one joint answer per evaluation item, or for a multi-turn task one joint trajectory, logged turn by turn.

With the task's ``num_turns = H > 1`` the team module evaluates each item with one joint trajectory
of up to ``H`` turns, sampled as collection samples them (the same transition, early stop and
return), and logs ``eval/turn_<t>/reward_mean`` (the mean task reward of turn ``t`` over the
trajectories that reached it, ``t = 1..H``) and ``eval/return_mean`` (the mean return of the whole
trajectory, :meth:`~comlrl_lightning.tasks.turns.Turns.trajectory_return`), also under the reference's
name ``eval/turn_1/expected_return`` (the expected return from turn 1 on). A single-turn task never
comes here.

**The headline** of an evaluation (the line printed, the reward curve, ``initial_eval_reward`` and
``final_eval_reward``) is one of these metrics, named as logged (:func:`headline_key`): with one turn
``eval/turn_1/reward_mean`` (turn 1's reward is the return), with several ``eval/return_mean``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples, domain_metrics, evaluation_observers
from comlrl_lightning.modules.reward_reports import ReportRecorder, reporting_oracle
from comlrl_lightning.rounds.trajectories import sample_joint, sample_trajectories, team_context_check, team_sampler
from comlrl_lightning.runtime.distributed import gather_objects
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.oracle import score_requests

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
    in one oracle call, in item order: :func:`~comlrl_lightning.rounds.trajectories.sample_trajectories`)
    from the recorder's reports in scoring order; ``turn_rewards[k]`` says which turns item ``k`` reached."""
    reports: List[List[Any]] = [[] for _ in turn_rewards]
    for turn in range(max((len(rewards) for rewards in turn_rewards), default=0)):
        reached = [k for k, rewards in enumerate(turn_rewards) if len(rewards) > turn]
        for k, report in zip(reached, recorder.take(len(reached))):
            reports[k].append(report)
    return reports


@dataclass(frozen=True)
class TeamSampling:
    """What an evaluation samples with: the module's generator, team and sampling settings, and its
    sampling context (eval mode, no grad, the precision's autocast)."""

    generator: Any
    team: Any
    settings: Any
    context: Callable[[], ContextManager[None]]


class Evaluator:
    """A team module's evaluation, an object the module owns and calls: it samples and scores the
    items it is given with the :class:`TeamSampling` it is given (one joint answer per item, or for a
    multi-turn task one trajectory), records the samples of the evaluation under way, keeps the last
    one's as :attr:`evaluated_samples`, and hands them to the Trainer's evaluation observers.

    The module decides when an evaluation starts (:meth:`start`) and ends (:meth:`finish`) and logs
    what they give; nothing else writes into it."""

    def __init__(self) -> None:
        self.record: Optional[EvaluationSamples] = None
        """The samples of the evaluation under way (``None``: not recording)."""
        self.evaluated_samples: Optional[EvaluationSamples] = None
        """This process's samples of the evaluation that ended last (``None`` before the first): read by
        observers after it (a callback's ``on_validation_end``; after fit's own evaluations before the
        first update and after the last, ``on_train_epoch_start`` and ``on_fit_end``), never changed."""
        self.evaluated_turns: Optional[List[List[float]]] = None
        """Per-turn rewards of every item evaluated outside the validation loop since the last summary."""

    def evaluate_items(
        self, sampling: TeamSampling, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> List[float]:
        """Processed task reward of one joint sample per item, drawn from ``stream`` (a multi-turn
        task: the return of one joint trajectory per item, :meth:`evaluate_turns`)."""
        if task.turns.multi:
            return self.evaluate_turns(sampling, items, task, stream)
        prompts = [task.prompts(item) for item in items]
        sampler = team_sampler(sampling.generator, sampling.team, sampling.settings, stream)
        with sampling.context():
            joint = sample_joint(sampler, items, prompts, 1)  # one joint answer per item, as a round samples
        texts = [[c.text for c in per_item[0]] for per_item in joint]
        requests = [([[text] for text in texts[k]], prompts[k], item) for k, item in enumerate(items)]
        oracle, recorder = reporting_oracle(task.oracle)  # what the reward says of each answer, kept
        rewards = [processed[0] for _, processed in score_requests(oracle, requests)]
        if self.record is not None:
            reports = [[report] for report in recorder.take(len(items))] if recorder is not None else None
            self.record.add(task, items, texts, rewards, reports=reports)
        return rewards

    def sample_turns(
        self, sampling: TeamSampling, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> Tuple[List[List[float]], List[float]]:
        """One joint trajectory per item: ``(per-turn rewards per item, returns)``, recorded as evaluation samples."""
        team = sampling.team
        sampler = team_sampler(sampling.generator, team, sampling.settings, stream)
        prompts = [task.prompts(item) for item in items]
        oracle, recorder = reporting_oracle(task.oracle)  # what the reward says of each answer, kept
        with sampling.context():
            fits = team_context_check(team, sampling.settings)
            sampled = sample_trajectories(
                sampler, oracle, task.turns, items, prompts, 1, lambda: team.tokenizers, context_check=fits
            )
        trajectories = [per_item[0] for per_item in sampled]
        returns = [task.turns.trajectory_return(t.rewards) for t in trajectories]
        turn_rewards = [list(t.rewards) for t in trajectories]
        if self.record is not None:
            texts = [[c.text for c in t.completions[-1]] for t in trajectories]
            earlier = [[[c.text for c in turn] for turn in t.completions[:-1]] for t in trajectories]
            reports = turn_reports(recorder, turn_rewards) if recorder is not None else None
            self.record.add(task, items, texts, returns, earlier, turn_rewards, reports)
        return turn_rewards, returns

    def evaluate_turns(
        self, sampling: TeamSampling, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> List[float]:
        """The returns of one trajectory per item; the per-turn rewards wait for :meth:`turn_summary`."""
        per_turn, returns = self.sample_turns(sampling, items, task, stream)
        self.evaluated_turns = (self.evaluated_turns or []) + per_turn
        return returns

    def turn_summary(self, world: int, return_mean: float) -> Dict[str, float]:
        """Per-turn means of what :meth:`evaluate_turns` evaluated (every process's) and ``return_mean``
        (the mean of the returns it gave) as ``eval/return_mean``; nothing for one turn."""
        if self.evaluated_turns is None:
            return {}
        per_turn, self.evaluated_turns = self.evaluated_turns, None
        return {**turn_means(gather_objects(turn_sums(per_turn), world)), RETURN_MEAN_KEY: return_mean}

    def predict(
        self, sampling: TeamSampling, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream
    ) -> EvaluationSamples:
        """The samples an evaluation of ``items`` draws from ``stream``, with their rewards (``predict``),
        recorded apart from any evaluation under way."""
        kept, samples = self.record, EvaluationSamples()
        self.record = samples
        try:
            self.evaluate_items(sampling, items, task, stream)
            return samples
        finally:
            self.record, self.evaluated_turns = kept, None

    def start(self) -> None:
        """An evaluation begins: its samples are recorded from now on."""
        self.record = EvaluationSamples()

    def finish(self, trainer: Any, module: Any, world: int) -> Dict[str, float]:
        """The observers' metrics of the evaluation that just ended (every process's samples, handed to
        each :class:`~comlrl_lightning.modules.evaluation_metrics.EvaluationObserver` of ``trainer``
        with ``module``), then stop recording; its samples (this process's) become :attr:`evaluated_samples`."""
        samples, self.record = self.record, None
        if samples is not None:
            self.evaluated_samples = samples
        observers = evaluation_observers(trainer)
        if samples is None or not observers:
            return {}
        merged = samples.merged(world)
        metrics: Dict[str, float] = {}
        for observer in observers:
            metrics.update(domain_metrics(functools.partial(observer.on_evaluation_samples, trainer, module), merged))
        return metrics


__all__ = [
    "RETURN_KEY",
    "RETURN_MEAN_KEY",
    "TURN_1_KEY",
    "Evaluator",
    "TeamSampling",
    "headline_key",
    "turn_means",
    "turn_reports",
    "turn_sums",
]
