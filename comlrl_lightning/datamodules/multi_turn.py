"""What multi-turn preference training does not cover, refused when the run is set up.

A round of several turns is collected as any round (:func:`comlrl_lightning.rounds.collect`: a
one-turn task's trajectories are its joint answers); :func:`check_multi_turn` refuses, before any
model loads, the teams, comparators and strategies whose rounds cannot have more than one turn.
"""

from __future__ import annotations

from typing import Optional

from comlrl_lightning.comparators import CentralizedComparator, Comparator
from comlrl_lightning.contracts import TeamSide
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.tasks.task import Task


def check_multi_turn(
    task: Task, module: TeamSide, comparator: Optional[Comparator] = None, sharded: bool = False
) -> None:
    """With ``num_turns > 1``: a decentralized team that trains on preference pairs (MADPO), a
    comparator that samples every role's own prompt, and agents not sharded across processes (each
    process's trajectories end at their own turns, so sharded sampling could not stay in step);
    anything else is a :class:`ConfigurationError`."""
    turns = task.turns.num_turns
    if turns == 1:
        return
    if module.trains_on != "pairs":
        raise ConfigurationError(
            f"num_turns={turns}: {type(module).__name__} trains on task items with single-turn rollouts; "
            "multi-turn preference training is MADPO's (MADPOModule). Set num_turns to 1 for MARLHF."
        )
    if task.centralized:
        raise ConfigurationError(
            f"num_turns={turns}: a centralized team (one joint completion for every role) is single-turn only; "
            "use a decentralized team or num_turns=1."
        )
    if sharded:
        raise ConfigurationError(
            f"num_turns={turns}: agents sharded across processes (ModelParallelStrategy) sample in lockstep, "
            "which trajectories ending at different turns cannot keep; use DDP or one process."
        )
    if isinstance(comparator, CentralizedComparator):
        raise ConfigurationError(
            f"num_turns={turns}: centralized comparator generation (CentralizedComparator) is single-turn only; "
            "use a comparator that samples each agent's own prompt, or num_turns=1."
        )


__all__ = ["check_multi_turn"]
