"""The names of :mod:`comlrl_lightning.rounds.snapshots` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.rounds.snapshots import PolicySnapshots, round_start_of, snapshot_name

__all__ = ["PolicySnapshots", "round_start_of", "snapshot_name"]
