"""The round pipeline: a round's items, sampled, scored and paired, in one place.

Follow one round from the data module to its pairs:

* :mod:`.collect`: :func:`collect` (the collector: sharding, progress, both sides, the pairing rule,
  unparsed counts, merging over the ranks) with its :class:`Side` and :class:`RoundSetup`;
* sampling (outside the package, beside the task: :mod:`comlrl_lightning.data.trajectories`):
  :func:`sample_joint` (joint answers: candidate ``j`` of every agent) and ``sample_sides``
  (every side's joint trajectories turn by turn, scored per turn; one turn is a joint answer);
* :mod:`.pairing`: the pairing rules, :class:`PairsWithin` and :class:`PairsAgainst`, and the pair of
  two trajectories (the single-turn record for one turn);
* :mod:`.result`: :class:`CollectionResult`, what a round gives back, merged over the ranks;
* :mod:`.records`: a stored record made trainable again (replay of earlier rounds).

Generating is the generators' (:mod:`comlrl_lightning.generation`), scoring the oracle's
(:mod:`comlrl_lightning.data.oracle`), the pure pair selection :mod:`comlrl_lightning.data.pairs`'s.
The data modules (:mod:`comlrl_lightning.datamodules`) decide when a round is due and call
:func:`collect`.

Imports: :mod:`comlrl_lightning.data` and what it imports; nothing above.
"""

from comlrl_lightning.data.trajectories import Trajectory, sample_joint, sample_trajectories
from comlrl_lightning.rounds.collect import RoundSetup, Side, collect, comparator_side, module_setup, trained_side
from comlrl_lightning.rounds.pairing import PairingRule, PairsAgainst, PairsWithin, pairing_rule
from comlrl_lightning.rounds.result import CollectionResult, merge_results

__all__ = [
    "CollectionResult",
    "PairingRule",
    "PairsAgainst",
    "PairsWithin",
    "RoundSetup",
    "Side",
    "Trajectory",
    "collect",
    "merge_results",
    "module_setup",
    "pairing_rule",
    "sample_joint",
    "sample_trajectories",
    "comparator_side",
    "trained_side",
]
