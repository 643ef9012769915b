"""Local comparators: the live team, a copy of it, fixed models, or an earlier policy.

Each samples ``K'`` completions per agent for every task item from the agents' own prompts,
with the module's generator and the comparator's own seeded random stream (so the current side's
sampling never depends on the comparator's).
"""

from __future__ import annotations

import copy
from typing import List, Optional

import torch

from comlrl_lightning.comparators.base import Comparator, ComparatorContext
from comlrl_lightning.runtime.devices import DeviceSpec
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import at_least, require


class CurrentComparator(Comparator):
    """The live agents (the same weights as the current side), sampling with their own random stream.

    Args:
        num_candidates: K' (``None``: K).
    """


class CurrentCopyComparator(Comparator):
    """A frozen copy of the agents on ``devices``, made at each collection.

    When every comparator device equals its agent's device no copy is made and it behaves exactly
    like :class:`CurrentComparator` (as the reference does).

    Args:
        devices: where the copies live: one device for all, or one per agent (``None``: the agents').
        num_candidates: K' (``None``: K).
    """

    def __init__(self, devices: DeviceSpec = None, num_candidates: Optional[int] = None) -> None:
        super().__init__(num_candidates)
        require(not isinstance(devices, list) or len(devices) >= 1, "devices must name at least one device.")
        self.devices = devices
        self._copy: Optional[Team] = None

    def check_team(self, num_agents: int) -> None:
        _check_length(self.devices, num_agents, "devices")

    def start_round(self, round_index: int) -> None:
        actors = self.context.actors()
        devices = self.context.devices(self.devices, "devices")
        if all(torch.device(d) == actors.device_of(i) for i, d in enumerate(devices)):
            self._copy = None
            return
        require(
            not actors.synced,
            "CurrentCopyComparator: copies of sharded agents (ModelParallelStrategy) on other "
            "devices are not supported; leave devices null or use CurrentComparator.",
        )
        clones = [copy.deepcopy(agent).to(device) for agent, device in zip(actors.agents, devices)]
        self._copy = Team(clones, tokenizers=list(actors.tokenizers))
        self._copy.requires_grad_(False).eval()

    def source(self) -> Team:
        return self._copy if self._copy is not None else self.context.actors()

    def end_round(self) -> None:
        self._copy = None


class ModelComparator(Comparator):
    """Fixed models, loaded once and frozen; they use the actors' tokenizers (same vocabulary).

    Args:
        model_name: one model (hub id or local path) for every agent.
        agents: one model per agent instead (a list of 1 or ``num_agents``).
        devices: where the models live: one device for all, or one per agent (``None``: the agents').
        num_candidates: K' (``None``: K).
    """

    def __init__(
        self,
        model_name: Optional[str] = None,
        agents: Optional[List[str]] = None,
        devices: DeviceSpec = None,
        num_candidates: Optional[int] = None,
    ) -> None:
        super().__init__(num_candidates)
        require(bool(model_name) != bool(agents), "ModelComparator needs exactly one of model_name or agents.")
        require(not isinstance(devices, list) or len(devices) >= 1, "devices must name at least one device.")
        self.model_name, self.agents, self.devices = model_name, agents, devices
        self._team: Optional[Team] = None

    def check_team(self, num_agents: int) -> None:
        _check_length(self.agents, num_agents, "agents")
        _check_length(self.devices, num_agents, "devices")

    def bind(self, context: ComparatorContext) -> None:
        super().bind(context)
        self._sources = context.per_agent(self.agents or [self.model_name], "agents")
        self._devices = context.devices(self.devices, "devices")

    def source(self) -> Team:
        if self._team is None:
            team = Team(self._sources, tokenizers=list(self.context.actors().tokenizers))
            for agent, device in zip(team.agents, self._devices):
                agent.to(device)
            self._team = team.requires_grad_(False).eval()
        return self._team


class HistoryComparator(Comparator):
    """The policy from ``k`` rounds before the current one, loaded once per round.

    For round ``r`` that is the snapshot taken at the start of round ``max(r - k, 0)``, so with
    ``k = 1`` the comparator is the previous round's policy (in the reference ``k = 1`` silently
    equals the current weights). The data module saves the snapshots at every round start. The
    snapshot's models are released after the round's collection, so training never holds them.

    Args:
        k: lag in rounds (>= 1).
        num_candidates: K' (``None``: K).
    """

    def __init__(self, k: int = 1, num_candidates: Optional[int] = None) -> None:
        super().__init__(num_candidates)
        at_least("k", k, 1)
        self.k = k
        self._loaded: Optional[int] = None
        self._team: Optional[Team] = None

    def snapshot_round(self, round_index: int) -> int:
        return max(round_index - self.k, 0)

    def start_round(self, round_index: int) -> None:
        wanted = self.snapshot_round(round_index)
        if self._team is None or self._loaded != wanted:
            context = self.context
            if context.snapshots is None:
                raise RuntimeError(
                    "HistoryComparator needs the data module's round-start policy snapshots (ComparatorContext.snapshots)."
                )
            actors = context.actors()
            team = context.snapshots.load(wanted, actors.tokenizers, context.agent_indices)
            for i, agent in enumerate(team.agents):
                agent.to(actors.device_of(i))
            self._team, self._loaded = team, wanted

    def source(self) -> Team:
        if self._team is None:
            raise RuntimeError("HistoryComparator.start_round() loads the snapshot before sampling.")
        return self._team

    def end_round(self) -> None:
        # the snapshot's models leave memory before training (as the reference's, loaded per use)
        self._team, self._loaded = None, None


def _check_length(values: DeviceSpec, num_agents: int, option: str) -> None:
    if isinstance(values, list):
        require(len(values) in (1, num_agents), f"{option} length ({len(values)}) must be 1 or {num_agents}.")
