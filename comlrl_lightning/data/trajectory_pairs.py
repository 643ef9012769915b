"""Preference pairs of multi-turn trajectories: the record, its JSON form, and scoring rows.

A :class:`TrajectoryPair` is a :class:`~comlrl_lightning.data.pairs.PreferencePair` whose winner
and loser are joint trajectories of several turns. Its first-turn fields keep their single-turn
meaning (``prompts``: the agents' first prompts; ``winner_completions``: the winner's first-turn
answers...), ``winner_reward`` / ``loser_reward`` are the trajectories' returns, and per agent the
record adds every turn in order (the prompt the agent read and its completion) and each turn's
reward::

    {..., "winner_turns": [{"prompts": [p_0, p_1], "completions": [c_0, c_1]}, ...one per agent],
          "loser_turns": [...], "winner_turn_rewards": [r_0, r_1], "loser_turn_rewards": [r_0]}

The two sides may have different numbers of turns (a trajectory that ended early). A single-turn
run never makes one: its records are exactly the single-turn records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

from comlrl_lightning.data.pairs import PreferencePair

SIDES = ("winner", "loser")


@dataclass
class TrajectoryPair(PreferencePair):
    """A winner/loser pair of joint trajectories (see the module's docstring).

    ``<side>_turn_prompts[agent][t]`` and ``<side>_turn_completions[agent][t]`` are agent ``agent``'s
    prompt and completion at turn ``t`` of that side's trajectory; ``<side>_turn_rewards[t]`` the
    turn's processed reward. The token ids beside them are what training scores; they are not part
    of the JSON record.
    """

    winner_turn_prompts: List[List[str]] = field(default_factory=list)
    winner_turn_completions: List[List[str]] = field(default_factory=list)
    loser_turn_prompts: List[List[str]] = field(default_factory=list)
    loser_turn_completions: List[List[str]] = field(default_factory=list)
    winner_turn_rewards: List[float] = field(default_factory=list)
    loser_turn_rewards: List[float] = field(default_factory=list)
    winner_turn_prompt_ids: List[List[List[int]]] = field(default_factory=list, repr=False)
    winner_turn_ids: List[List[List[int]]] = field(default_factory=list, repr=False)
    loser_turn_prompt_ids: List[List[List[int]]] = field(default_factory=list, repr=False)
    loser_turn_ids: List[List[List[int]]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for side in SIDES:  # plain text only (a rendered ChatPrompt keeps its conversation)
            prompts = getattr(self, f"{side}_turn_prompts")
            setattr(self, f"{side}_turn_prompts", [[str(text) for text in agent] for agent in prompts])

    def to_record(self) -> Dict[str, Any]:
        """The single-turn record followed by every agent's turns and each turn's reward per side."""
        record = super().to_record()
        for side in SIDES:
            prompts, completions = getattr(self, f"{side}_turn_prompts"), getattr(self, f"{side}_turn_completions")
            record[f"{side}_turns"] = [
                {"prompts": list(agent_prompts), "completions": list(agent_completions)}
                for agent_prompts, agent_completions in zip(prompts, completions)
            ]
        for side in SIDES:
            record[f"{side}_turn_rewards"] = [float(value) for value in getattr(self, f"{side}_turn_rewards")]
        return record

    @classmethod
    def from_record(cls, record: Dict[str, Any], num_agents: int) -> "TrajectoryPair":
        """Read a multi-turn record back (no token ids; agents missing from the record have no turns)."""
        base = PreferencePair.from_record(record, num_agents)
        turns: Dict[str, Any] = {}
        for side in SIDES:
            agents = list(record.get(f"{side}_turns") or [])[:num_agents]
            agents += [{}] * (num_agents - len(agents))
            turns[f"{side}_turn_prompts"] = [[str(t) for t in agent.get("prompts") or []] for agent in agents]
            turns[f"{side}_turn_completions"] = [[str(t) for t in agent.get("completions") or []] for agent in agents]
            turns[f"{side}_turn_rewards"] = [float(v) for v in record.get(f"{side}_turn_rewards") or []]
        return cls(**{name: getattr(base, name) for name in PREFERENCE_FIELDS}, **turns)

    def turn_rows(self, agent: int, side: str) -> List[Tuple[List[int], List[int]]]:
        """``(prompt ids, completion ids)`` of every turn of agent ``agent`` on ``side``, in order."""
        return list(zip(getattr(self, f"{side}_turn_prompt_ids")[agent], getattr(self, f"{side}_turn_ids")[agent]))


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
    return "winner_turns" in record or "winner_turn_prompts" in record


def pair_from_state(state: Dict[str, Any]) -> PreferencePair:
    """A pair from its checkpointed fields (``dataclasses.asdict``): a :class:`TrajectoryPair`
    when it has turns, else a :class:`PreferencePair`."""
    return TrajectoryPair(**state) if "winner_turn_prompts" in state else PreferencePair(**state)


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


__all__ = ["TrajectoryPair", "is_trajectory_record", "pair_from_state", "pair_rows", "trajectory_rows"]
