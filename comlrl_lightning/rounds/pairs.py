"""Preference pairs: the record, its exact JSON form, and how pairs are chosen from scores."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, TypeGuard, TypeVar, get_args

from comlrl_lightning.validation import OptionError, choice, require

PairSelection = Literal["reward_gap", "all", "random"]
"""How pairs within one side's candidates are chosen (``pair_selection`` of every data module)."""
PAIR_SELECTIONS: Tuple[PairSelection, ...] = get_args(PairSelection)

IterativePairSelection = Literal[PairSelection, "comparator_reward"]
"""``pair_selection`` of an iterative run: also ``comparator_reward`` (highest comparator score first)."""
ITERATIVE_PAIR_SELECTIONS: Tuple[IterativePairSelection, ...] = get_args(IterativePairSelection)

Selection = TypeVar("Selection", bound=str)


@dataclass
class PreferencePair:
    """One winner/loser pair of joint responses for one task item (the reference's record).

    The token ids are kept beside the texts so training scores exactly the sampled tokens; they
    are not part of the JSON record (:meth:`to_record`).
    """

    prompts: List[str]
    winner_completions: List[str]
    loser_completions: List[str]
    winner_reward: float
    loser_reward: float
    candidate_reward_mean: float
    raw_rewards: Optional[List[float]] = None
    target_raw_reward: Optional[float] = None
    comparator_raw_reward: Optional[float] = None
    prompt_ids: List[List[int]] = field(default_factory=list, repr=False)
    winner_ids: List[List[int]] = field(default_factory=list, repr=False)
    loser_ids: List[List[int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        # plain text only: a rendered ChatPrompt's conversation is not part of the record or a checkpoint
        self.prompts = [str(prompt) for prompt in self.prompts]

    def to_record(self) -> Dict[str, Any]:
        """The record, keys in the reference's order (``raw_rewards`` is ``[]`` when unset)."""
        return {
            "prompts": list(self.prompts),
            "winner_completions": list(self.winner_completions),
            "loser_completions": list(self.loser_completions),
            "winner_reward": float(self.winner_reward),
            "loser_reward": float(self.loser_reward),
            "candidate_reward_mean": float(self.candidate_reward_mean),
            "raw_rewards": [float(v) for v in self.raw_rewards] if self.raw_rewards is not None else [],
            "target_raw_reward": _optional_float(self.target_raw_reward),
            "comparator_raw_reward": _optional_float(self.comparator_raw_reward),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_record(), ensure_ascii=False)

    @classmethod
    def from_record(cls, record: Dict[str, Any], num_agents: int) -> "PreferencePair":
        """Read a record back (texts padded with "" / truncated to ``num_agents``; no token ids)."""

        def texts(key: str) -> List[str]:
            values = [str(v) for v in (record.get(key) or [])][:num_agents]
            return values + [""] * (num_agents - len(values))

        raw = record.get("raw_rewards")
        return cls(
            prompts=texts("prompts"),
            winner_completions=texts("winner_completions"),
            loser_completions=texts("loser_completions"),
            winner_reward=float(record.get("winner_reward", 0.0) or 0.0),
            loser_reward=float(record.get("loser_reward", 0.0) or 0.0),
            candidate_reward_mean=float(record.get("candidate_reward_mean", 0.0) or 0.0),
            raw_rewards=[float(v) for v in raw] if isinstance(raw, list) else [],
            target_raw_reward=_optional_float(record.get("target_raw_reward")),
            comparator_raw_reward=_optional_float(record.get("comparator_raw_reward")),
        )


def check_pair_selection(
    pair_selection: Optional[str], pairs_per_sample: Optional[int], allowed: Sequence[Selection]
) -> Selection:
    """``pair_selection`` normalised (``None``: ``reward_gap``) and one of ``allowed``; ``all`` keeps every
    pair, so ``preference_pairs_per_sample`` must then be ``None``."""
    selection = choice("pair_selection", pair_selection or "reward_gap", allowed)
    require(
        not (selection == "all" and pairs_per_sample is not None),
        "preference_pairs_per_sample must be null when pair_selection='all'.",
    )
    # the entry of ``allowed`` equal to it: the same string, typed as one of ``allowed``
    return next(option for option in allowed if option == selection)


def is_pair_selection(selection: str) -> TypeGuard[PairSelection]:
    """Whether ``selection`` chooses among one side's candidates (every selection but ``comparator_reward``,
    which needs a comparator's)."""
    return selection in PAIR_SELECTIONS


def _optional_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def ordered_pairs(scores: Sequence[float]) -> List[Tuple[float, int, int]]:
    """Every ``(gap, winner, loser)`` with ``gap = scores[winner] - scores[loser] > 0``; ties dropped.

    Listed in ``(i, j)`` lexicographic order of the candidate indices.
    """
    return [
        (scores[i] - scores[j], i, j)
        for i in range(len(scores))
        for j in range(len(scores))
        if i != j and scores[i] - scores[j] > 0
    ]


def select_pairs(
    scores: Sequence[float],
    pair_selection: PairSelection = "reward_gap",
    pairs_per_sample: Optional[int] = 16,
    rng: Optional[random.Random] = None,
) -> List[Tuple[int, int]]:
    """Choose ``(winner, loser)`` candidate indices for one item (base trainers).

    * ``reward_gap``: largest score gap first (stable: ties keep ``(i, j)`` order), first ``pairs_per_sample``;
    * ``random``: shuffled with ``rng`` (seeded, unlike the reference's global ``random``), first ``pairs_per_sample``;
    * ``all``: every non-tied pair sorted by ``(winner, loser)``, no limit.
    """
    candidates = ordered_pairs(scores)
    if pair_selection == "reward_gap":
        candidates.sort(key=lambda entry: -entry[0])
    elif pair_selection == "random":
        (rng or random.Random(0)).shuffle(candidates)
    elif pair_selection == "all":
        candidates.sort(key=lambda entry: (entry[1], entry[2]))
        pairs_per_sample = None
    else:
        raise OptionError(f"pair_selection must be one of: {', '.join(PAIR_SELECTIONS)}.")
    if pairs_per_sample is not None:
        candidates = candidates[:pairs_per_sample]
    return [(winner, loser) for _, winner, loser in candidates]
