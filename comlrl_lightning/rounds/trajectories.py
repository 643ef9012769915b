"""Sampling joint answers (:func:`sample_joint`) and joint trajectories turn by turn (:func:`sample_sides`).

What a round (:func:`comlrl_lightning.rounds.collect`) and an evaluation sample.

A joint answer is candidate ``j`` of every agent for one item (the same index across agents). Per
item, :func:`sample_trajectories` takes ``K`` joint answers as the first turns of ``K`` joint
trajectories and goes on with one sample per agent per turn, given the agent's own conversation,
until ``num_turns`` or an early stop (:class:`~comlrl_lightning.tasks.turns.Turns`); a one-turn task's
trajectories are its joint answers, scored once. Every turn's joint answers of all trajectories are
scored in one oracle call, and the next turn's transitions are all called (and checked) before the
next turn is sampled, so a bad transition fails before anything of the round is written. A side's
sampler is anything with the comparators' signature ``sample(items, prompts[item][agent],
num_samples) -> completions[agent][item][j]``: the team being trained (:func:`team_sampler`), or any
comparator (every later turn asks for one sample per trajectory).

A later turn's prompt (the conversation so far plus the transition's message) can outgrow the
model's context, which the first-turn check (:func:`~comlrl_lightning.tasks.task.check_prompts_fit`)
cannot see. Given a ``context_check``, such a trajectory ends at the last turn that fit, keeps
what it took, and the turn warns once, naming the first such item, trajectory, agent and excess:
a long run goes on, and no text of the conversation is cut or changed.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

from comlrl_lightning.generation.base import Completion, GenerationSettings, Generator, prompt_overflow, sample_team
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.oracle import score_requests
from comlrl_lightning.tasks.turns import TurnHistory, Turns, call_transition, next_prompt

Sampler = Callable[[Sequence[Dict[str, Any]], Sequence[Sequence[str]], int], List[List[List[Completion]]]]
"""``sample(items, prompts[item][agent], num_samples) -> completions[agent][item][j]``."""

ContextCheck = Callable[[int, str], Optional[str]]
"""``check(agent, prompt)``: why agent ``agent`` cannot sample after ``prompt`` within its model's
context (:func:`~comlrl_lightning.generation.base.prompt_overflow`), ``None`` when it can."""


@dataclass
class Trajectory:
    """One joint trajectory: per turn every agent's prompt and completion, and the turn's rewards."""

    prompts: List[List[str]] = field(default_factory=list)  # [turn][agent]
    completions: List[List[Completion]] = field(default_factory=list)  # [turn][agent]
    raw_rewards: List[float] = field(default_factory=list)
    rewards: List[float] = field(default_factory=list)

    def history(self) -> TurnHistory:
        """What a transition reads (texts only)."""
        return TurnHistory(
            prompts=[list(turn) for turn in self.prompts],
            responses=[[c.text for c in turn] for turn in self.completions],
            raw_rewards=list(self.raw_rewards),
            rewards=list(self.rewards),
        )

    def per_agent(self, agent: int) -> Dict[str, list]:
        """Agent ``agent``'s turns: prompts, completion texts and ids, in order."""
        return {
            "prompts": [str(turn[agent]) for turn in self.prompts],
            "completions": [turn[agent].text for turn in self.completions],
            "ids": [list(turn[agent].ids) for turn in self.completions],
        }


def team_sampler(generator: Generator, team: Any, settings: GenerationSettings, stream: RandomStream) -> Sampler:
    """A team as a trajectory sampler: every agent samples its own prompts with ``generator``."""

    def sample(items: Sequence[Dict[str, Any]], prompts: Sequence[Sequence[str]], count: int):
        return sample_team(generator, team, prompts, count, settings, stream)

    return sample


def team_context_check(team: Any, settings: GenerationSettings) -> ContextCheck:
    """The context check of ``team``'s agents sampling ``settings.max_new_tokens`` after a prompt
    (:func:`~comlrl_lightning.generation.base.prompt_overflow`). Both sides of an iterative round
    are checked with it: the team trains on the comparator's trajectories too."""
    return lambda agent, prompt: prompt_overflow(team, agent, prompt, settings.max_new_tokens)


def sample_joint(
    sample: Sampler, items: Sequence[Dict[str, Any]], prompts: Sequence[Sequence[str]], count: int
) -> List[List[List[Completion]]]:
    """``joint[item][j][agent]``: ``count`` joint answers per item, answer ``j`` being candidate ``j`` of
    every agent (``prompts[item][agent]``); an item has as many as every agent has (a source may return
    fewer than ``count``)."""
    per_agent = sample(items, prompts, count)
    num_agents = len(per_agent)
    return [
        [
            [per_agent[agent][k][j] for agent in range(num_agents)]
            for j in range(min(len(per_agent[agent][k]) for agent in range(num_agents)))
        ]
        for k in range(len(items))
    ]


def sample_trajectories(
    sample: Sampler,
    oracle: Any,
    turns: Turns,
    items: Sequence[Dict[str, Any]],
    first_prompts: Sequence[Sequence[str]],
    num_candidates: int,
    tokenizers: Callable[[], Sequence[Any]],
    progress: Optional[Any] = None,
    context_check: Optional[ContextCheck] = None,
) -> List[List[Trajectory]]:
    """``trajectories[item][j]``: ``num_candidates`` joint trajectories per item of one sampler
    (:func:`sample_sides` with one side)."""
    sides = sample_sides(
        [sample], [num_candidates], oracle, turns, items, first_prompts, tokenizers, progress, context_check
    )
    return sides[0]


def sample_sides(
    samplers: Sequence[Sampler],
    counts: Sequence[int],
    oracle: Any,
    turns: Turns,
    items: Sequence[Dict[str, Any]],
    first_prompts: Sequence[Sequence[str]],
    tokenizers: Callable[[], Sequence[Any]],
    progress: Optional[Any] = None,
    context_check: Optional[ContextCheck] = None,
) -> List[List[List[Trajectory]]]:
    """``trajectories[side][item][j]``: ``counts[side]`` joint trajectories per item of every sampler
    (see the module's docstring), the sides in step: each turn every side samples (in order), then
    that turn of every side is scored in one oracle call, item by item (an item's first turns of one
    side as one request: :func:`_score_turn`).

    ``tokenizers()`` gives each agent's tokenizer, needed only to render a conversation that went
    through a chat template (:func:`~comlrl_lightning.tasks.turns.next_prompt`). ``progress`` (a
    :class:`~comlrl_lightning.runtime.progress.Progress`, or anything with its ``advance(count)`` and
    ``part(size)``) advances by one per trajectory and turn sampled, inside the sampling call (a
    backend that reports its batches moves it as they finish), and by the turns left of a trajectory
    that ends early: ``num_turns`` per trajectory in all. ``context_check`` (``None``: a sampler
    without a context, e.g. a scripted one) ends a trajectory whose next prompt does not fit
    (:func:`fitting_prompts`).
    """
    advance = progress.advance if progress is not None else (lambda count: None)
    trajectories: List[List[List[Trajectory]]] = []
    for sample, count in zip(samplers, counts):
        with _part(progress, len(items) * count):
            joint = sample_joint(sample, items, first_prompts, count)
        trajectories.append(
            [
                [Trajectory(prompts=[list(prompts)], completions=[answer]) for answer in answers]
                for prompts, answers in zip(first_prompts, joint)
            ]
        )
    # (side, item, j), item by item: the order a round's requests had when each side was a list of candidates
    active = [
        (s, k, j) for k in range(len(items)) for s in range(len(samplers)) for j in range(len(trajectories[s][k]))
    ]
    _score_turn(oracle, items, trajectories, active)
    for turn in range(1, turns.num_turns):
        going_on = [(s, k, j) for s, k, j in active if not turns.stops(trajectories[s][k][j].rewards[-1])]
        advance((len(active) - len(going_on)) * (turns.num_turns - turn))  # the turns they will not take
        active = going_on
        if not active:
            break
        prompts = [_next_prompts(turns, items[k], k, turn - 1, trajectories[s][k][j], tokenizers) for s, k, j in active]
        fitting = fitting_prompts(context_check, prompts, [(k, j) for _, k, j in active], turn, turns.num_turns)
        advance((len(active) - len(fitting)) * (turns.num_turns - turn))
        active, prompts = [active[m] for m in fitting], [prompts[m] for m in fitting]
        if not active:
            break
        answered = _sample_turn(samplers, items, active, prompts, trajectories, progress)
        advance((len(active) - len(answered)) * (turns.num_turns - turn))
        active = [active[m] for m in sorted(answered)]
        _score_turn(oracle, items, trajectories, active)
    return trajectories


def _sample_turn(
    samplers: Sequence[Sampler],
    items: Sequence[Dict[str, Any]],
    active: Sequence[Tuple[int, int, int]],
    prompts: Sequence[List[str]],
    trajectories: List[List[List[Trajectory]]],
    progress: Optional[Any],
) -> List[int]:
    """One later turn: each side samples one answer for its ``active`` trajectories ``(side, item, j)``
    (``prompts[m]`` for ``active[m]``), appended to them; the positions ``m`` that got an answer."""
    answered = []
    for s, sample in enumerate(samplers):
        mine = [m for m in range(len(active)) if active[m][0] == s]
        if not mine:
            continue
        with _part(progress, len(mine)):
            sampled = sample([items[active[m][1]] for m in mine], [prompts[m] for m in mine], 1)
        for row, m in enumerate(mine):
            # a source that returned nothing for a trajectory (an API comparator's shortfall) ends it here
            if all(per_agent[row] for per_agent in sampled):
                _, k, j = active[m]
                trajectories[s][k][j].prompts.append(prompts[m])
                trajectories[s][k][j].completions.append([per_agent[row][0] for per_agent in sampled])
                answered.append(m)
    return answered


def _part(progress: Optional[Any], size: int) -> ContextManager[Any]:
    """``progress.part(size)``: the sampling inside counts for ``size`` units (nothing without ``progress``)."""
    return progress.part(size) if progress is not None else contextlib.nullcontext()


def fitting_prompts(
    check: Optional[ContextCheck],
    prompts: Sequence[Sequence[str]],
    active: Sequence[Tuple[int, int]],
    turn: int,
    num_turns: int,
) -> List[int]:
    """The indices ``m`` of the next prompts ``prompts[m][agent]`` of trajectories ``active[m] =
    (item, trajectory)`` that every agent can sample within its context (all of them when ``check``
    is ``None``). The others end before ``turn`` (0-based), with one warning for the turn that names
    the first of them and its excess."""
    if check is None:
        return list(range(len(prompts)))
    fitting, overflows = [], []
    for m, per_agent in enumerate(prompts):
        why = next((reason for agent, prompt in enumerate(per_agent) if (reason := check(agent, prompt))), None)
        if why is None:
            fitting.append(m)
        else:
            overflows.append((active[m], why))
    if overflows:
        (item, trajectory), why = overflows[0]
        warnings.warn(
            f"{len(overflows)} of {len(prompts)} trajectories end before turn {turn + 1} of {num_turns}: the next "
            f"prompt does not fit the context (item {item}, trajectory {trajectory}: {why}); each keeps the turns it "
            "took. Shorten the transition's messages or lower max_new_tokens.",
            stacklevel=3,
        )
    return fitting


def _agent_tokenizer(tokenizers: Callable[[], Sequence[Any]], agent: int) -> Any:
    return tokenizers()[agent]


def _next_prompts(
    turns: Turns,
    item: Dict[str, Any],
    index: int,
    turn: int,
    trajectory: Trajectory,
    tokenizers: Callable[[], Sequence[Any]],
) -> List[str]:
    transition = turns.transition
    if transition is None:  # Turns refuses num_turns > 1 without one; a single turn never comes here
        raise ValueError("a second turn needs the task's external_transition")
    num_agents = len(trajectory.prompts[-1])
    messages = call_transition(transition, item, turn, trajectory.history(), num_agents, index)
    return [
        next_prompt(
            functools.partial(_agent_tokenizer, tokenizers, agent),
            trajectory.prompts[-1][agent],
            trajectory.completions[-1][agent].text,
            messages[agent],
            f"agent {agent}",
        )
        for agent in range(num_agents)
    ]


def _score_turn(oracle: Any, items: Sequence[Dict[str, Any]], trajectories, active) -> None:
    """Score the last turn of every ``active`` ``(side, item, j)`` trajectory in one oracle call: one
    side's trajectories of one item that read the same prompts (every first turn) as one request of
    several joint answers, as an item's candidates are scored (a reward model scores them as one batch)."""
    groups: List[Tuple[int, int, List[str], List[int]]] = []  # (side, item, the prompts read, trajectories)
    for s, k, j in active:
        prompts = trajectories[s][k][j].prompts[-1]
        if groups and groups[-1][:2] == (s, k) and groups[-1][2] == prompts:
            groups[-1][3].append(j)
        else:
            groups.append((s, k, prompts, [j]))
    requests = [
        ([[trajectories[s][k][j].completions[-1][a].text for j in js] for a in range(len(prompts))], prompts, items[k])
        for s, k, prompts, js in groups
    ]
    for (s, k, _, js), (raw, processed) in zip(groups, score_requests(oracle, requests)):
        for position, j in enumerate(js):
            trajectories[s][k][j].raw_rewards.append(raw[position])
            trajectories[s][k][j].rewards.append(processed[position])


__all__ = [
    "ContextCheck",
    "Sampler",
    "Trajectory",
    "fitting_prompts",
    "sample_joint",
    "sample_sides",
    "sample_trajectories",
    "team_context_check",
    "team_sampler",
]
