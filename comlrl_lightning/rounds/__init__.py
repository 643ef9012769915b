"""The round pipeline: a round's items sampled, scored and paired, its files and run state, in one place.

Follow one round from the data module to its pairs:

* :mod:`.collect`: :func:`collect` (the collector: sharding, progress, both sides, the pairing rule,
  unparsed counts, merging over the ranks) with its :class:`Side` and :class:`RoundSetup`;
* :mod:`.trajectories`: :func:`sample_joint` (joint answers: candidate ``j`` of every agent) and
  ``sample_sides`` (every side's joint trajectories turn by turn, scored per turn; one turn is a
  joint answer), over the module's generator;
* :mod:`.pairing`: the pairing rules, :class:`PairsWithin` and :class:`PairsAgainst`, and the pair of
  two trajectories (the single-turn record for one turn); the pair records themselves are
  :mod:`.pairs` (:class:`PreferencePair`, pair selection) and :mod:`.trajectory_pairs`;
* :mod:`.result`: :class:`CollectionResult`, what a round gives back, merged over the ranks;
* the run state a round leaves: :mod:`.replay` (round files, the replay buffer and the replay rules:
  :class:`CurrentReplay`, :class:`NearestKReplay`, :class:`AllHistoryReplay`,
  :class:`LambdaDecayReplay`), :mod:`.round_records` (a round file's bytes record by record),
  :mod:`.snapshots` (the policy at each round's start, for the history comparator), and
  :mod:`.records` (a stored record made trainable again).

Generating is the generators' (:mod:`comlrl_lightning.generation`), scoring the oracle's
(:mod:`comlrl_lightning.tasks.oracle`) and the team's. The data modules
(:mod:`comlrl_lightning.datamodules`) decide when a round is due and call :func:`collect`.

Imports: the task definition (:mod:`comlrl_lightning.tasks`, never a built-in task), the contracts,
the checkpoint assets (:mod:`comlrl_lightning.checkpoints`), the generators, the team, the runtime
and the foundation modules; nothing above (the comparators import the snapshots).
"""

from comlrl_lightning.rounds.collect import RoundSetup, Side, collect, comparator_side, module_setup, trained_side
from comlrl_lightning.rounds.pairing import PairingRule, PairsAgainst, PairsWithin, pairing_rule
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayBuffer,
    ReplayRule,
)
from comlrl_lightning.rounds.result import CollectionResult, merge_results
from comlrl_lightning.rounds.trajectories import Trajectory, sample_joint, sample_trajectories

__all__ = [
    "AllHistoryReplay",
    "CollectionResult",
    "CurrentReplay",
    "LambdaDecayReplay",
    "NearestKReplay",
    "PairingRule",
    "PairsAgainst",
    "PairsWithin",
    "PreferencePair",
    "ReplayBuffer",
    "ReplayRule",
    "RoundSetup",
    "Side",
    "Trajectory",
    "collect",
    "comparator_side",
    "merge_results",
    "module_setup",
    "pairing_rule",
    "sample_joint",
    "sample_trajectories",
    "trained_side",
]
