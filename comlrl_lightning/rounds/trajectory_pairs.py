"""Preference pairs of multi-turn trajectories: the record, its JSON form, and scoring rows.

A :class:`TrajectoryPair` is a :class:`~comlrl_lightning.rounds.pairs.PreferencePair` whose winner
and loser are joint trajectories of several turns. Its first-turn fields keep their single-turn
meaning (``prompts``: the agents' first prompts; ``winner_completions``: the winner's first-turn
answers...), ``winner_reward`` / ``loser_reward`` are the trajectories' returns, and per agent the
record adds every turn in order (the prompt the agent read and its completion) and each turn's
reward, and the mean reward of each turn over the item's trajectories that reached it (what
training logs as ``turn_<t>/reward_mean``)::

    {..., "winner_turns": [{"prompts": [p_0, p_1], "completions": [c_0, c_1]}, ...one per agent],
          "loser_turns": [...], "winner_turn_rewards": [r_0, r_1], "loser_turn_rewards": [r_0],
          "candidate_turn_reward_means": [m_0, m_1]}

The two sides may have different numbers of turns (a trajectory that ended early). A single-turn
run never makes one: its records are exactly the single-turn records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

from comlrl_lightning.rounds.pairs import PreferencePair

SIDES = ("winner", "loser")


@dataclass
class SideTurns:
    """One side's trajectory, agent by agent: ``prompts[agent][t]`` and ``completions[agent][t]`` are
    agent ``agent``'s prompt and completion at turn ``t``, ``rewards[t]`` the turn's processed reward.
    The token ids beside them are what training scores; they are not part of the JSON record."""

    prompts: List[List[str]] = field(default_factory=list)
    completions: List[List[str]] = field(default_factory=list)
    rewards: List[float] = field(default_factory=list)
    prompt_ids: List[List[List[int]]] = field(default_factory=list, repr=False)
    ids: List[List[List[int]]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        # plain text only: a rendered ChatPrompt's conversation is not part of the record or a checkpoint
        self.prompts = [[str(text) for text in agent] for agent in self.prompts]

    def record(self) -> List[Dict[str, List[str]]]:
        """Per agent: ``{"prompts": [...], "completions": [...]}`` in turn order."""
        return [{"prompts": list(p), "completions": list(c)} for p, c in zip(self.prompts, self.completions)]

    @classmethod
    def from_record(cls, agents: Sequence[Any], rewards: Sequence[Any], num_agents: int) -> "SideTurns":
        """Read one side back (no token ids; agents missing from the record have no turns)."""
        agents = [agent if isinstance(agent, dict) else {} for agent in list(agents)[:num_agents]]
        agents += [{}] * (num_agents - len(agents))
        return cls(
            prompts=[[str(t) for t in agent.get("prompts") or []] for agent in agents],
            completions=[[str(t) for t in agent.get("completions") or []] for agent in agents],
            rewards=[float(v) for v in rewards],
        )

    def rows(self, agent: int) -> List[Tuple[List[int], List[int]]]:
        """``(prompt ids, completion ids)`` of every turn of agent ``agent``, in order."""
        return list(zip(self.prompt_ids[agent], self.ids[agent]))


@dataclass
class TrajectoryPair(PreferencePair):
    """A winner/loser pair of joint trajectories (see the module's docstring): the single-turn
    fields of the first turn, each side's turns (:class:`SideTurns`), and per turn the mean processed
    reward of the item's trajectories that reached it (``candidate_reward_mean`` is their returns' mean)."""

    winner_turns: SideTurns = field(default_factory=SideTurns)
    loser_turns: SideTurns = field(default_factory=SideTurns)
    candidate_turn_reward_means: List[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        for side in SIDES:  # a checkpoint's state holds each side as a plain dict
            turns = getattr(self, f"{side}_turns")
            if isinstance(turns, dict):
                setattr(self, f"{side}_turns", SideTurns(**turns))

    def to_record(self) -> Dict[str, Any]:
        """The single-turn record followed by every agent's turns and each turn's reward per side."""
        record = super().to_record()
        record.update(winner_turns=self.winner_turns.record(), loser_turns=self.loser_turns.record())
        record.update(
            winner_turn_rewards=[float(v) for v in self.winner_turns.rewards],
            loser_turn_rewards=[float(v) for v in self.loser_turns.rewards],
            candidate_turn_reward_means=[float(v) for v in self.candidate_turn_reward_means],
        )
        return record

    @classmethod
    def from_record(cls, record: Dict[str, Any], num_agents: int) -> "TrajectoryPair":
        """Read a multi-turn record back (no token ids)."""
        base = PreferencePair.from_record(record, num_agents)
        winner, loser = (
            SideTurns.from_record(
                record.get(f"{side}_turns") or [], record.get(f"{side}_turn_rewards") or [], num_agents
            )
            for side in SIDES
        )
        return cls(
            **{name: getattr(base, name) for name in PREFERENCE_FIELDS},
            winner_turns=winner,
            loser_turns=loser,
            candidate_turn_reward_means=[float(v) for v in record.get("candidate_turn_reward_means") or []],
        )

    def turn_rows(self, agent: int, side: str) -> List[Tuple[List[int], List[int]]]:
        """``(prompt ids, completion ids)`` of every turn of agent ``agent`` on ``side``, in order."""
        return getattr(self, f"{side}_turns").rows(agent)


PREFERENCE_FIELDS = (
    "prompts",
    "winner_completions",
    "loser_completions",
    "winner_reward",
    "loser_reward",
    "candidate_reward_mean",
    "raw_rewards",
    "target_raw_reward",
    "comparator_raw_reward",
)


def is_trajectory_record(record: Dict[str, Any]) -> bool:
    """Whether a stored record (a round file's or a checkpoint's) is a multi-turn one."""
    return "winner_turns" in record


def pair_from_state(state: Dict[str, Any]) -> PreferencePair:
    """A pair from its checkpointed fields (``dataclasses.asdict``): a :class:`TrajectoryPair`
    when it has turns, else a :class:`PreferencePair`."""
    return TrajectoryPair(**state) if "winner_turns" in state else PreferencePair(**state)


def pair_rows(pair: PreferencePair, agent: int, side: str) -> List[Tuple[List[int], List[int]]]:
    """The scoring rows of agent ``agent`` on ``side`` of any pair: every turn of a trajectory pair,
    or the one ``(prompt, completion)`` of a single-turn pair."""
    if isinstance(pair, TrajectoryPair):
        return pair.turn_rows(agent, side)
    return [(pair.prompt_ids[agent], getattr(pair, f"{side}_ids")[agent])]


def trajectory_rows(pairs: Sequence[PreferencePair], agent: int) -> Tuple[List[List[int]], List[List[int]], List[int]]:
    """Agent ``agent``'s scoring rows of ``B`` pairs and the sequence each row adds to.

    Returns ``(prompts, completions, owners)``: row ``r`` is a turn of pair ``p``'s winner
    (``owners[r] = p``) or loser (``owners[r] = B + p``); summing the rows' log-probs by owner gives
    ``[winners; losers]`` trajectory log-probs.
    """
    prompts: List[List[int]] = []
    completions: List[List[int]] = []
    owners: List[int] = []
    for offset, side in enumerate(SIDES):
        for index, pair in enumerate(pairs):
            for prompt, completion in pair_rows(pair, agent, side):
                prompts.append(list(prompt))
                completions.append(list(completion))
                owners.append(offset * len(pairs) + index)
    return prompts, completions, owners


__all__ = ["SideTurns", "TrajectoryPair", "is_trajectory_record", "pair_from_state", "pair_rows", "trajectory_rows"]
