"""The names of :mod:`comlrl_lightning.rounds.trajectory_pairs` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.rounds.trajectory_pairs import (
    PREFERENCE_FIELDS,
    SIDES,
    SideTurns,
    TrajectoryPair,
    is_trajectory_record,
    pair_from_state,
    pair_rows,
    trajectory_rows,
)

__all__ = [
    "PREFERENCE_FIELDS",
    "SIDES",
    "SideTurns",
    "TrajectoryPair",
    "is_trajectory_record",
    "pair_from_state",
    "pair_rows",
    "trajectory_rows",
]
