"""Local comparators: the other side of every comparison in iterative training.

A comparator samples ``K'`` completions per agent for every task item, from the agents' own
prompts, with its own seeded random stream (so the current side's sampling never depends on the
comparator's). They share one small interface:

* ``start_round(round_index)`` before a collection (refresh copies, load a snapshot...),
* ``sample(items, prompts, num_candidates, settings)`` -> ``completions[agent][item][j]``,
* ``metrics()`` -> round metrics (e.g. candidates an API did not return),
* ``end_round()`` after it (free what is only needed during collection).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from ..rng import RandomStream
from ..snapshots import PolicySnapshots
from ..team import Completion, GenerationSettings, Team


class Comparator:
    """Samples the comparator side from a team chosen by the subclass."""

    def __init__(self, team_of_actors: Callable[[], Team], stream: RandomStream) -> None:
        self._actors = team_of_actors
        self.stream = stream

    def start_round(self, round_index: int) -> None:
        """Prepare the source of round ``round_index`` (0-based)."""

    def source(self) -> Team:
        return self._actors()

    def sample(
        self,
        items: Sequence[Dict[str, Any]],
        prompts: Sequence[Sequence[str]],
        num_candidates: int,
        settings: GenerationSettings,
    ) -> List[List[List[Completion]]]:
        """Up to ``num_candidates`` completions per agent for every item (``prompts[item][agent]``).

        Returns ``completions[agent][item][j]``; every agent has the same count ``j`` per item.
        """
        team = self.source()
        return [
            team.generate(agent, [p[agent] for p in prompts], num_candidates, settings, self.stream)
            for agent in range(team.num_agents)
        ]

    def end_round(self) -> None:
        """Release what only the collection needed."""

    def metrics(self) -> Dict[str, float]:
        """Round metrics of this comparator (logged with the ``iter/`` metrics), e.g. shortfalls."""
        return {}


class CurrentComparator(Comparator):
    """``current``: the live agents (same weights as the current side), their own random stream."""


class CurrentCopyComparator(Comparator):
    """``current_copy``: a frozen copy of the agents on ``comparator_devices``, made at each collection.

    When every comparator device equals its agent's device no copy is made and it behaves exactly
    like ``current`` (as the reference does).
    """

    def __init__(self, team_of_actors: Callable[[], Team], stream: RandomStream, devices: Sequence[str]) -> None:
        super().__init__(team_of_actors, stream)
        self.devices = list(devices)
        self._copy: Optional[Team] = None

    def start_round(self, round_index: int) -> None:
        actors = self._actors()
        if all(torch.device(d) == actors.device_of(i) for i, d in enumerate(self.devices)):
            self._copy = None
            return
        clones = [copy.deepcopy(agent).to(device) for agent, device in zip(actors.agents, self.devices)]
        self._copy = Team(clones, tokenizers=list(actors.tokenizers))
        self._copy.requires_grad_(False).eval()

    def source(self) -> Team:
        return self._copy if self._copy is not None else self._actors()

    def end_round(self) -> None:
        self._copy = None


class ModelComparator(Comparator):
    """``model``: fixed models (``comparator_model_name`` or ``comparator_agents``), loaded once, frozen.

    They use the actors' tokenizers, so they must share each actor's vocabulary.
    """

    def __init__(
        self, team_of_actors: Callable[[], Team], stream: RandomStream, sources: Sequence[str], devices: Sequence[str]
    ) -> None:
        super().__init__(team_of_actors, stream)
        self.sources, self.devices = list(sources), list(devices)
        self._team: Optional[Team] = None

    def source(self) -> Team:
        if self._team is None:
            team = Team(self.sources, tokenizers=list(self._actors().tokenizers))
            for agent, device in zip(team.agents, self.devices):
                agent.to(device)
            self._team = team.requires_grad_(False).eval()
        return self._team


class HistoryComparator(Comparator):
    """``history``: the policy from ``k`` rounds before the current one, loaded once per round.

    For round ``r`` that is the snapshot taken at the start of round ``max(r - k, 0)``, so with
    ``k = 1`` the comparator is the previous round's policy (in the reference ``k = 1`` silently
    equals the current weights). Snapshots are saved by the data module at every round start.
    """

    def __init__(
        self, team_of_actors: Callable[[], Team], stream: RandomStream, snapshots: PolicySnapshots, k: int
    ) -> None:
        super().__init__(team_of_actors, stream)
        self.snapshots, self.k = snapshots, k
        self._loaded: Optional[int] = None
        self._team: Optional[Team] = None

    def snapshot_round(self, round_index: int) -> int:
        return max(round_index - self.k, 0)

    def start_round(self, round_index: int) -> None:
        wanted = self.snapshot_round(round_index)
        if self._team is None or self._loaded != wanted:
            team = self.snapshots.load(wanted, self._actors().tokenizers)
            for i, agent in enumerate(team.agents):
                agent.to(self._actors().device_of(i))
            self._team, self._loaded = team, wanted

    def source(self) -> Team:
        assert self._team is not None, "start_round() loads the snapshot first"
        return self._team

    def end_round(self) -> None:
        # Keep the loaded snapshot: the next round often needs the same or the next one.
        pass
