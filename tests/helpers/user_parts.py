"""Parts a user writes in their own project, named by import path in a config (as the documentation shows)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Sequence

from comlrl_lightning.comparators import Comparator
from comlrl_lightning.rounds.replay import ReplayRule


class ColdComparator(Comparator):
    """The live agents, sampling at their own (lower) temperature: a sharper opponent.

    Args:
        temperature: the comparator's sampling temperature.
        num_candidates: K' (``None``: K).
    """

    def __init__(self, temperature: float = 0.3, num_candidates: int | None = None) -> None:
        super().__init__(num_candidates)
        if not temperature > 0:
            raise ValueError("temperature must be > 0.")
        self.temperature = temperature
        self.rounds: List[int] = []

    def start_round(self, round_index: int) -> None:
        self.rounds.append(round_index)

    def sample(self, items: Sequence[Dict[str, Any]], prompts, num_candidates: int, settings):
        colder = dataclasses.replace(settings, temperature=self.temperature)
        return super().sample(items, prompts, num_candidates, colder)

    def state_dict(self) -> Dict[str, Any]:
        return {"rounds": list(self.rounds)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.rounds = list(state.get("rounds", []))


class NewestTwoReplay(ReplayRule):
    """The two newest rounds, the newest three times as likely."""

    def eligible(self, shards):
        return list(shards[-2:])

    def weights(self, count: int) -> List[float]:
        return [1.0] if count == 1 else [0.25, 0.75]
