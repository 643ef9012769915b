"""The comparator base class: the other side of every comparison in iterative training.

A comparator is an object the user picks in the config (``data.init_args.comparator`` with a
``class_path`` and its own ``init_args``). The iterative data module owns it and drives it
through one round at a time:

* :meth:`Comparator.bind` once, in the data module's ``setup``, with a :class:`ComparatorContext`
  (the live team, the module's generator, the comparator's random stream, devices, snapshots);
* :meth:`Comparator.start_round` before each collection (refresh a copy, load a snapshot...);
* :meth:`Comparator.sample` -> ``completions[agent][item][j]`` for the round's items;
* :meth:`Comparator.end_round` after it, and :meth:`Comparator.metrics` for the round's log;
* :meth:`Comparator.state_dict` / :meth:`Comparator.load_state_dict`: saved inside the data
  module's checkpoint state, for comparators that keep state across rounds.

To write your own, subclass :class:`Comparator` and override :meth:`source` (a team whose agents
sample, with the module's generator) or :meth:`sample` (anything else), then name the class by
import path in the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from comlrl_lightning.generation.base import (
    Completion,
    GenerationSettings,
    Generator,
    sample_team,
)
from comlrl_lightning.rounds.snapshots import PolicySnapshots
from comlrl_lightning.runtime.devices import DeviceSpec, resolve_devices
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import at_least, require


@dataclass
class ComparatorContext:
    """What a comparator may use, handed over by the data module in ``setup``.

    Args:
        actors: returns the live team being trained (or a view of some of its agents).
        generator: the team module's generation backend; local comparators sample with it.
        stream: the comparator's own random stream, re-seeded from ``(seed, round, rank)`` every round.
        agent_devices: the device of each agent this context sees.
        snapshots: round-start policy snapshots (only when a comparator asks for them).
        agent_indices: which of the team's agents this context sees (all, or one for a centralized source).
        team_size: the team's number of agents.
    """

    actors: Callable[[], Team]
    generator: Generator
    stream: RandomStream
    agent_devices: List[str]
    snapshots: Optional[PolicySnapshots] = None
    agent_indices: List[int] = field(default_factory=list)
    team_size: int = 0

    def __post_init__(self) -> None:
        if not self.agent_indices:
            self.agent_indices = list(range(len(self.agent_devices)))
        self.team_size = self.team_size or len(self.agent_indices)

    def view(self, agent_index: int) -> "ComparatorContext":
        """The same context seeing only agent ``agent_index`` (as agent 0 of a one-agent team)."""
        actors = self.actors

        def one_agent() -> Team:
            team = actors()
            return Team([team.agents[agent_index]], tokenizers=[team.tokenizers[agent_index]])

        return replace(
            self,
            actors=one_agent,
            agent_devices=[self.agent_devices[agent_index]],
            agent_indices=[self.agent_indices[agent_index]],
        )

    def per_agent(self, values: Sequence[Any], option: str) -> List[Any]:
        """A per-agent option (1 value for all, or one per team agent) for the agents this context sees."""
        values = list(values)
        require(len(values) in (1, self.team_size), f"{option} length ({len(values)}) must be 1 or {self.team_size}.")
        return [values[0] if len(values) == 1 else values[i] for i in self.agent_indices]

    def devices(self, spec: DeviceSpec, option: str) -> List[str]:
        """Devices of ``spec`` (``None``/``auto``: the agents' own) for the agents this context sees."""
        if spec is None or spec == "auto" or isinstance(spec, str):
            return resolve_devices(spec, len(self.agent_indices), option, self.agent_devices)
        return self.per_agent(spec, option)


class Comparator:
    """Samples the comparator side of a round; by default from the live team (see :meth:`source`).

    Args:
        num_candidates: K', candidates per agent and item (``None``: the data module's
            ``preference_num_candidates``).
    """

    def __init__(self, num_candidates: Optional[int] = None) -> None:
        at_least("num_candidates", num_candidates, 1, allow_none=True)
        self.num_candidates = num_candidates
        self._context: Optional[ComparatorContext] = None

    # ------------------------------------------------------------------------------------------
    # Round protocol

    def check_team(self, num_agents: int) -> None:
        """Check the per-agent options against the team size (called when the config is parsed,
        where the data module knows ``num_agents``, and again when bound)."""

    def bind(self, context: ComparatorContext) -> None:
        """Called once by the data module's ``setup``, before any round."""
        self.check_team(context.team_size)
        self._context = context

    @property
    def context(self) -> ComparatorContext:
        if self._context is None:
            raise RuntimeError(f"{type(self).__name__} is not bound: the data module binds it in setup().")
        return self._context

    @property
    def stream(self) -> RandomStream:
        return self.context.stream

    def start_round(self, round_index: int) -> None:
        """Prepare the source of round ``round_index`` (0-based)."""

    def check_saved_options(self, options: Mapping[str, Any]) -> None:
        """Refuse a secret of this comparator's in ``options`` (what the run saves: the model's and
        the data module's hyperparameters, as plain mappings); here: nothing to keep secret."""

    def source(self) -> Team:
        """The team whose agents sample the comparator side (here: the live agents)."""
        return self.context.actors()

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
        return sample_team(self.context.generator, self.source(), prompts, num_candidates, settings, self.stream)

    def sample_texts(
        self, prompts: Sequence[str], items: Sequence[Dict[str, Any]], count: int, settings: GenerationSettings
    ) -> List[List[str]]:
        """``count`` texts per prompt from this comparator's single agent (a centralized source)."""
        completions = self.context.generator.generate(self.source(), 0, prompts, count, settings, self.stream)
        return [[c.text for c in per_prompt] for per_prompt in completions]

    def end_round(self) -> None:
        """Release what only the collection needed."""

    def metrics(self) -> Dict[str, float]:
        """Round metrics of this comparator (logged with the ``iter/`` metrics), e.g. shortfalls."""
        return {}

    def snapshot_round(self, round_index: int) -> Optional[int]:
        """The round-start policy snapshot round ``round_index`` compares against (``None``: none).

        The data module saves a snapshot at every round start when this is not ``None``, prunes
        those no later round needs, and checks on resume that the next one is there.
        """
        return None

    # ------------------------------------------------------------------------------------------
    # Checkpointed state (inside the data module's state)

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        options = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in options.items())})"
