"""Multi-turn collection: joint trajectories sampled turn by turn, scored, and paired.

Per item, ``K`` joint trajectories: trajectory ``j`` starts from candidate ``j`` of every agent
(the single-turn candidates) and goes on with one sample per agent per turn, given the agent's own
conversation, until ``num_turns`` or an early stop (:class:`~comlrl_lightning.data.turns.Turns`).
Every turn's joint answers of all trajectories are scored in one oracle call, and the next turn's
transitions are all called (and checked) before the next turn is sampled, so a bad transition
fails before anything of the round is written. A side's sampler is anything with the comparators'
signature ``sample(items, prompts[item][agent], num_samples) -> completions[agent][item][j]``: the
team being trained, or any comparator (every later turn asks for one sample per trajectory).

A later turn's prompt (the conversation so far plus the transition's message) can outgrow the
model's context, which the first-turn check (:func:`~comlrl_lightning.data.task.check_prompts_fit`)
cannot see. Given a ``context_check``, such a trajectory ends at the last turn that fit, keeps
what it took, and the turn warns once, naming the first such item, trajectory, agent and excess:
a long run goes on, and no text of the conversation is cut or changed.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from comlrl_lightning.data.collection import CollectionResult, mean_like_numpy, select_against
from comlrl_lightning.data.oracle import score_requests
from comlrl_lightning.data.pairs import IterativePairSelection, PairSelection, select_pairs
from comlrl_lightning.data.trajectory_pairs import SideTurns, TrajectoryPair
from comlrl_lightning.data.turns import TurnHistory, Turns, call_transition, next_prompt
from comlrl_lightning.generation.base import Completion, GenerationSettings, Generator, prompt_overflow, sample_team
from comlrl_lightning.runtime.rng import RandomStream

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
    """``trajectories[item][j]``: ``num_candidates`` joint trajectories per item (see the module's docstring).

    ``tokenizers()`` gives each agent's tokenizer, needed only to render a conversation that went
    through a chat template (:func:`~comlrl_lightning.data.turns.next_prompt`). ``progress`` (anything
    with ``advance(count)``, e.g. :class:`~comlrl_lightning.runtime.progress.Progress`) advances by one
    per trajectory and turn sampled and scored, and by the turns left of a trajectory that ends early:
    ``num_turns`` per trajectory in all. ``context_check`` (``None``: a sampler without a context,
    e.g. a scripted one) ends a trajectory whose next prompt does not fit (:func:`fitting_prompts`).
    """
    advance = progress.advance if progress is not None else (lambda count: None)
    first = sample(items, first_prompts, num_candidates)
    num_agents = len(first)
    trajectories = _first_turns(first_prompts, first)
    active = [(k, j) for k in range(len(items)) for j in range(len(trajectories[k]))]
    _score_turn(oracle, items, trajectories, active)
    advance(len(active))
    for turn in range(1, turns.num_turns):
        going_on = [(k, j) for k, j in active if not turns.stops(trajectories[k][j].rewards[-1])]
        advance((len(active) - len(going_on)) * (turns.num_turns - turn))  # the turns they will not take
        active = going_on
        if not active:
            break
        prompts = [
            _next_prompts(turns, items[k], k, turn - 1, trajectories[k][j], num_agents, tokenizers) for k, j in active
        ]
        fitting = fitting_prompts(context_check, prompts, active, turn, turns.num_turns)
        advance((len(active) - len(fitting)) * (turns.num_turns - turn))
        active, prompts = [active[m] for m in fitting], [prompts[m] for m in fitting]
        if not active:
            break
        sampled = sample([items[k] for k, _ in active], prompts, 1)
        # a source that returned nothing for a trajectory (an API comparator's shortfall) ends it here
        answered = [m for m in range(len(active)) if all(sampled[a][m] for a in range(num_agents))]
        for m in answered:
            k, j = active[m]
            trajectories[k][j].prompts.append(prompts[m])
            trajectories[k][j].completions.append([sampled[a][m][0] for a in range(num_agents)])
        advance((len(active) - len(answered)) * (turns.num_turns - turn))
        active = [active[m] for m in answered]
        _score_turn(oracle, items, trajectories, active)
        advance(len(active))
    return trajectories


def _first_turns(first_prompts: Sequence[Sequence[str]], first: List[List[List[Completion]]]) -> List[List[Trajectory]]:
    """Per item, one trajectory per joint candidate ``j`` (as many as every agent has) of ``first[agent][item][j]``."""
    num_agents = len(first)
    trajectories = []
    for k, prompts in enumerate(first_prompts):
        count = min(len(first[agent][k]) for agent in range(num_agents))
        trajectories.append(
            [
                Trajectory(prompts=[list(prompts)], completions=[[first[a][k][j] for a in range(num_agents)]])
                for j in range(count)
            ]
        )
    return trajectories


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
    num_agents: int,
    tokenizers: Callable[[], Sequence[Any]],
) -> List[str]:
    transition = turns.transition
    if transition is None:  # Turns refuses num_turns > 1 without one; a single turn never comes here
        raise ValueError("a second turn needs the task's external_transition")
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
    """Score the last turn of every ``active`` trajectory in one oracle call."""
    requests = []
    for k, j in active:
        trajectory = trajectories[k][j]
        requests.append(([[c.text] for c in trajectory.completions[-1]], trajectory.prompts[-1], items[k]))
    for (k, j), (raw, processed) in zip(active, score_requests(oracle, requests)):
        trajectories[k][j].raw_rewards.append(raw[0])
        trajectories[k][j].rewards.append(processed[0])


def trajectory_pair(
    winner: Trajectory, loser: Trajectory, turns: Turns, encode: Callable[[int, str], List[int]], **extra: Any
) -> TrajectoryPair:
    """The pair of two trajectories of one item; ``encode(agent, prompt)`` tokenizes a prompt as sampling did."""
    sides = {side: side_turns(trajectory, encode) for side, trajectory in (("winner", winner), ("loser", loser))}
    return TrajectoryPair(
        prompts=list(winner.prompts[0]),
        winner_completions=[c.text for c in winner.completions[0]],
        loser_completions=[c.text for c in loser.completions[0]],
        winner_reward=turns.trajectory_return(winner.rewards),
        loser_reward=turns.trajectory_return(loser.rewards),
        prompt_ids=[list(ids[0]) for ids in sides["winner"].prompt_ids],
        winner_ids=[list(ids[0]) for ids in sides["winner"].ids],
        loser_ids=[list(ids[0]) for ids in sides["loser"].ids],
        winner_turns=sides["winner"],
        loser_turns=sides["loser"],
        **extra,
    )


def side_turns(trajectory: Trajectory, encode: Callable[[int, str], List[int]]) -> SideTurns:
    """One side of a pair: every agent's turns of ``trajectory``, prompts tokenized with ``encode``."""
    agents = [trajectory.per_agent(agent) for agent in range(len(trajectory.prompts[0]))]
    return SideTurns(
        prompts=[agent["prompts"] for agent in agents],
        completions=[agent["completions"] for agent in agents],
        rewards=list(trajectory.rewards),
        prompt_ids=[[encode(index, prompt) for prompt in agent["prompts"]] for index, agent in enumerate(agents)],
        ids=[agent["ids"] for agent in agents],
    )


def turn_reward_means(trajectories: Sequence[Trajectory]) -> List[float]:
    """Per turn ``t``, the mean processed reward of the ``trajectories`` that reached it (:func:`mean_like_numpy`)."""
    longest = max((len(t.rewards) for t in trajectories), default=0)
    return [
        mean_like_numpy([t.rewards[turn] for t in trajectories if len(t.rewards) > turn]) for turn in range(longest)
    ]


def pairs_within(
    trajectories: List[List[Trajectory]],
    turns: Turns,
    encode: Callable[[int, str], List[int]],
    pair_selection: PairSelection,
    pairs_per_sample: Optional[int],
    stream: RandomStream,
) -> CollectionResult:
    """Base trainers: pairs between one item's trajectories by their returns, ties dropped, chosen as
    :func:`~comlrl_lightning.data.pairs.select_pairs` chooses single-turn candidates."""
    result = CollectionResult()
    for per_item in trajectories:
        returns = [turns.trajectory_return(t.rewards) for t in per_item]
        result.scores.append(returns)
        means = {
            "candidate_reward_mean": mean_like_numpy(returns),
            "candidate_turn_reward_means": turn_reward_means(per_item),
        }
        result.item_pairs.append(
            [
                trajectory_pair(per_item[w], per_item[lose], turns, encode, **means)
                for w, lose in select_pairs(returns, pair_selection, pairs_per_sample, stream.python)
            ]
        )
    return result


def pairs_against(
    current: List[List[Trajectory]],
    comparator: List[List[Trajectory]],
    turns: Turns,
    encode: Callable[[int, str], List[int]],
    pair_selection: IterativePairSelection,
    pairs_per_sample: Optional[int],
    stream: RandomStream,
) -> CollectionResult:
    """Iterative trainers: current trajectory ``j`` against comparator trajectory ``j`` by their returns,
    chosen per item by :func:`~comlrl_lightning.data.collection.select_against`."""
    result = CollectionResult()
    for mine, theirs in zip(current, comparator):
        sides = {"current": mine, "comparator": theirs}
        scores = {side: [turns.trajectory_return(t.rewards) for t in ts] for side, ts in sides.items()}
        raw = {side: [turns.trajectory_return(t.raw_rewards) for t in ts] for side, ts in sides.items()}
        result.scores.append(scores["current"] + scores["comparator"])
        result.target_raw_rewards.append(raw["current"])
        result.comparator_raw_rewards.append(raw["comparator"])
        means = {
            "candidate_reward_mean": mean_like_numpy(scores["current"] + scores["comparator"]),
            "candidate_turn_reward_means": turn_reward_means(mine + theirs),
        }
        result.item_pairs.append(
            [
                trajectory_pair(
                    sides[winner][j],
                    sides[loser][j],
                    turns,
                    encode,
                    **means,
                    raw_rewards=[raw[winner][j], raw[loser][j]],
                    target_raw_reward=raw["current"][j],
                    comparator_raw_reward=raw["comparator"][j],
                )
                for j, winner, loser in select_against(scores, pair_selection, pairs_per_sample, stream)
            ]
        )
    return result


__all__ = [
    "ContextCheck",
    "Sampler",
    "Trajectory",
    "fitting_prompts",
    "pairs_against",
    "pairs_within",
    "sample_trajectories",
    "team_context_check",
    "team_sampler",
    "trajectory_pair",
]
