"""Pairing rules: how a round's joint trajectories become preference pairs.

A rule gets every item's trajectories of each side it pairs (``sides[side][item][j]``, a one-turn
task's being its joint answers) and gives the round's :class:`~comlrl_lightning.rounds.result.CollectionResult`.
Two rules ship: :class:`PairsWithin` (one side: the team's trajectories of one item against each
other, chosen as :func:`~comlrl_lightning.rounds.pairs.select_pairs` chooses) and :class:`PairsAgainst`
(two sides: the team's trajectory ``j`` against the comparator's trajectory ``j``, chosen by
:func:`select_against`). A trajectory is compared by its score (:func:`trajectory_score`: its return,
or a one-turn trajectory's reward as it is), and a pair of one-turn trajectories is the single-turn
:class:`~comlrl_lightning.rounds.pairs.PreferencePair` (its record the reference's, byte for byte); of
longer ones a :class:`~comlrl_lightning.rounds.trajectory_pairs.TrajectoryPair` holding every turn.
docs/parts.md shows how to write another rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from comlrl_lightning.rounds.pairs import IterativePairSelection, PairSelection, PreferencePair, select_pairs
from comlrl_lightning.rounds.result import CollectionResult, mean_like_numpy
from comlrl_lightning.rounds.trajectories import Trajectory
from comlrl_lightning.rounds.trajectory_pairs import SideTurns, TrajectoryPair
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.turns import Turns

Encoder = Callable[[int, str], List[int]]
"""``encode(agent, prompt)``: the prompt's token ids as agent ``agent`` sampled after it."""

ItemTrajectories = List[List[Trajectory]]
"""``trajectories[item][j]``: one side's trajectories of a round."""


class PairingRule(Protocol):
    """How a round's trajectories become pairs (see the module's docstring).

    ``num_sides``: how many sides the rule pairs (1: the team's alone; 2: the team's, then the
    comparator's). :meth:`pair` gets that many sides of the same items and returns one entry per
    item in ``item_pairs`` and ``scores`` (and, comparing two sides, ``target_raw_rewards`` and
    ``comparator_raw_rewards``); ``stream`` is the round's, for a rule that draws.
    """

    num_sides: int

    def pair(
        self, sides: Sequence[ItemTrajectories], turns: Turns, encode: Encoder, stream: RandomStream
    ) -> CollectionResult: ...


def trajectory_score(turns: Turns, rewards: Sequence[float]) -> float:
    """What a pair compares a trajectory by: its return (:meth:`~comlrl_lightning.tasks.turns.Turns.trajectory_return`);
    a one-turn task's trajectory by its one reward as it is (a discounted sum would turn ``-0.0`` into ``0.0``)."""
    return float(rewards[0]) if turns.num_turns == 1 else turns.trajectory_return(rewards)


def item_means(turns: Turns, scores: Sequence[float], trajectories: Sequence[Trajectory]) -> Dict[str, Any]:
    """The means every pair of an item carries: of its candidates' scores, and with several turns each
    turn's (:func:`turn_reward_means`)."""
    means: Dict[str, Any] = {"candidate_reward_mean": mean_like_numpy(scores)}
    if turns.num_turns > 1:
        means["candidate_turn_reward_means"] = turn_reward_means(trajectories)
    return means


def joint_pair(winner: Trajectory, loser: Trajectory, turns: Turns, encode: Encoder, **fields: Any) -> PreferencePair:
    """The pair of two trajectories of one item: a :class:`PreferencePair` of their answers for a one-turn
    task, else a :class:`TrajectoryPair` (:func:`trajectory_pair`); ``fields``: the record's other fields."""
    if turns.num_turns > 1:
        return trajectory_pair(winner, loser, turns, encode, **fields)
    prompts = winner.prompts[0]
    return PreferencePair(
        prompts=list(prompts),
        winner_completions=[c.text for c in winner.completions[0]],
        loser_completions=[c.text for c in loser.completions[0]],
        winner_reward=trajectory_score(turns, winner.rewards),
        loser_reward=trajectory_score(turns, loser.rewards),
        prompt_ids=[list(encode(agent, prompt)) for agent, prompt in enumerate(prompts)],
        winner_ids=[list(c.ids) for c in winner.completions[0]],
        loser_ids=[list(c.ids) for c in loser.completions[0]],
        **fields,
    )


@dataclass(frozen=True)
class PairsWithin:
    """Pairs between one item's trajectories of the team (base trainers), by :func:`trajectory_score`,
    ties dropped, chosen by ``selection`` (:func:`~comlrl_lightning.rounds.pairs.select_pairs`) and
    at most ``pairs_per_sample`` per item (``None``: every one)."""

    selection: PairSelection
    pairs_per_sample: Optional[int]
    num_sides = 1

    def pair(
        self, sides: Sequence[ItemTrajectories], turns: Turns, encode: Encoder, stream: RandomStream
    ) -> CollectionResult:
        result = CollectionResult()
        for per_item in sides[0]:
            scores = [trajectory_score(turns, t.rewards) for t in per_item]
            result.scores.append(scores)
            means = item_means(turns, scores, per_item)
            chosen = select_pairs(scores, self.selection, self.pairs_per_sample, stream.python)
            result.item_pairs.append(
                [joint_pair(per_item[w], per_item[lose], turns, encode, **means) for w, lose in chosen]
            )
        return result


@dataclass(frozen=True)
class PairsAgainst:
    """The team's trajectory ``j`` against the comparator's trajectory ``j`` of each item (iterative
    trainers), by :func:`trajectory_score`, chosen per item by :func:`select_against`. Each pair keeps
    both raw scores (before the reward processor) and which side's is which."""

    selection: IterativePairSelection
    pairs_per_sample: Optional[int]
    num_sides = 2

    def pair(
        self, sides: Sequence[ItemTrajectories], turns: Turns, encode: Encoder, stream: RandomStream
    ) -> CollectionResult:
        result = CollectionResult()
        for mine, theirs in zip(sides[0], sides[1]):
            by_side = {"current": mine, "comparator": theirs}
            scores = {side: [trajectory_score(turns, t.rewards) for t in ts] for side, ts in by_side.items()}
            raw = {side: [trajectory_score(turns, t.raw_rewards) for t in ts] for side, ts in by_side.items()}
            result.scores.append(scores["current"] + scores["comparator"])
            result.target_raw_rewards.append(raw["current"])
            result.comparator_raw_rewards.append(raw["comparator"])
            means = item_means(turns, scores["current"] + scores["comparator"], mine + theirs)
            result.item_pairs.append(
                [
                    joint_pair(
                        by_side[winner][j],
                        by_side[loser][j],
                        turns,
                        encode,
                        **means,
                        raw_rewards=[raw[winner][j], raw[loser][j]],
                        target_raw_reward=raw["current"][j],
                        comparator_raw_reward=raw["comparator"][j],
                    )
                    for j, winner, loser in select_against(scores, self.selection, self.pairs_per_sample, stream)
                ]
            )
        return result


def pairing_rule(
    selection: IterativePairSelection, pairs_per_sample: Optional[int], against_comparator: bool
) -> PairingRule:
    """The shipped rule for a round: :class:`PairsAgainst` with a comparator, else :class:`PairsWithin`
    (whose ``selection`` cannot be ``comparator_reward``: a :class:`ValueError`, which the data modules'
    option checks keep from happening)."""
    if against_comparator:
        return PairsAgainst(selection, pairs_per_sample)
    if selection == "comparator_reward":
        raise ValueError("pair_selection 'comparator_reward' needs a comparator")
    return PairsWithin(selection, pairs_per_sample)


def select_against(
    scores: Dict[str, List[float]], pair_selection: str, pairs_per_sample: Optional[int], stream: RandomStream
) -> List[Tuple[int, str, str]]:
    """``(j, winner side, loser side)`` of one item's comparisons, current candidate ``j`` against
    comparator candidate ``j``, in the order ``pair_selection`` keeps them.

    Only ``j < min(K, K')`` are compared; ``gap_j = current_j - comparator_j``; the side with the
    higher score wins and ``gap_j = 0`` is dropped. ``comparator_reward`` sorts by
    ``(comparator_j, |gap_j|)`` descending, ``reward_gap`` by ``|gap_j|`` descending (stable),
    ``random`` shuffles with ``stream``, ``all`` keeps index order; all but ``all`` then keep the
    first ``pairs_per_sample`` (``None``: every one).
    """
    entries = []
    for j in range(min(len(scores["current"]), len(scores["comparator"]))):
        gap = scores["current"][j] - scores["comparator"][j]
        if gap != 0:
            winner, loser = ("current", "comparator") if gap > 0 else ("comparator", "current")
            entries.append((abs(gap), scores["comparator"][j], j, winner, loser))
    if pair_selection == "comparator_reward":
        entries.sort(key=lambda e: (e[1], e[0]), reverse=True)
    elif pair_selection == "reward_gap":
        entries.sort(key=lambda e: -e[0])
    elif pair_selection == "random":
        stream.python.shuffle(entries)
    if pair_selection != "all" and pairs_per_sample is not None:
        entries = entries[:pairs_per_sample]
    return [(j, winner, loser) for _, _, j, winner, loser in entries]


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


__all__ = [
    "Encoder",
    "PairingRule",
    "PairsAgainst",
    "PairsWithin",
    "joint_pair",
    "pairing_rule",
    "select_against",
    "side_turns",
    "trajectory_pair",
    "trajectory_score",
    "turn_reward_means",
]
