"""Observers: callbacks that watch a run and draw it, never change it.

:class:`RewardCurvePlot` (the evaluation reward against updates), :class:`SamplesLog` (every
evaluation's prompts, completions and rewards as JSON lines and a W&B table),
:class:`ParameterSummary` (one line of parameter counts), :class:`RewardDistributions` (per-round
reward histograms, their JSON record and figures); :mod:`.curves` reads training curves from a CSV
log and :mod:`.plots` draws a round's distributions and the replay rules' weights. For runs that resume:
:class:`CheckpointRecord` (who wrote a checkpoint, how far it got; logs that continue),
:class:`ResumableCheckpoint` (``ModelCheckpoint`` whose ``last.ckpt`` is always the newest),
:class:`CommitCheckpoints` (self-contained ``checkpoint-{N}`` folders at commits, kept to a limit)
and :class:`ResumableCSVLogger` (one ``metrics.csv`` for the whole run).

Imports: :mod:`comlrl_lightning.rounds`, :mod:`comlrl_lightning.checkpoints` and the layers below them; they see the modules and data
modules only through :mod:`comlrl_lightning.contracts`.
"""

from comlrl_lightning.callbacks.checkpoints import CheckpointRecord, CommitCheckpoints, ResumableCheckpoint
from comlrl_lightning.callbacks.csv_logger import ResumableCSVLogger
from comlrl_lightning.callbacks.parameter_summary import ParameterSummary
from comlrl_lightning.callbacks.reward_curve import RewardCurvePlot
from comlrl_lightning.callbacks.reward_distributions import RewardDistributions
from comlrl_lightning.callbacks.samples_log import SamplesLog

__all__ = [
    "CheckpointRecord",
    "CommitCheckpoints",
    "ParameterSummary",
    "ResumableCSVLogger",
    "ResumableCheckpoint",
    "RewardCurvePlot",
    "RewardDistributions",
    "SamplesLog",
]
