"""What a collection gives back: the pairs per item and the scores it saw, merged over the ranks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence

import numpy as np

from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.runtime.distributed import unshard


def mean_like_numpy(values: Sequence[float]) -> float:
    """``mean(values)``, ``0.0`` when empty, computed as the reference's ``float(numpy.mean(values))``.

    NumPy sums pairwise (eight running sums for eight or more values), so the last bit can differ
    from ``sum(values) / len(values)``; records must match the reference's byte for byte.
    """
    return float(np.mean(values)) if len(values) else 0.0


@dataclass
class CollectionResult:
    """The pairs of one collection, per item, and what it saw (processed candidate scores per item).

    A collection against a comparator also keeps every candidate's raw reward (before the reward
    processor) per item and side: the current team's (``target_raw_rewards``) and the comparator's.
    """

    item_pairs: List[List[PreferencePair]] = field(default_factory=list)
    scores: List[List[float]] = field(default_factory=list)
    target_raw_rewards: List[List[float]] = field(default_factory=list)
    comparator_raw_rewards: List[List[float]] = field(default_factory=list)
    unparsed: int = 0
    """Joint completions of a centralized team that did not split into roles (scored as empty roles)."""

    @property
    def pairs(self) -> List[PreferencePair]:
        return [pair for pairs in self.item_pairs for pair in pairs]

    @property
    def reward_mean(self) -> float:
        """Mean of every processed score of the collection (:func:`mean_like_numpy`)."""
        return mean_like_numpy([v for per_item in self.scores for v in per_item])


def merge_results(parts: Sequence[CollectionResult], world: int) -> CollectionResult:
    """One result from the ranks' results on item shards ``items[rank::world]`` (item order restored)."""
    return CollectionResult(
        item_pairs=unshard([part.item_pairs for part in parts], world),
        scores=unshard([part.scores for part in parts], world),
        target_raw_rewards=unshard([part.target_raw_rewards for part in parts], world),
        comparator_raw_rewards=unshard([part.comparator_raw_rewards for part in parts], world),
        unparsed=sum(part.unparsed for part in parts),
    )


__all__ = ["CollectionResult", "mean_like_numpy", "merge_results"]
