"""The names ``comlrl_lightning.data`` had, kept for configs, checkpoints and scripts written before
the package was split by job (a config naming ``comlrl_lightning.data.CurrentReplay`` still runs).

New code and the shipped configs name the homes: the task definition is :mod:`comlrl_lightning.tasks`
(``comlrl_lightning.tasks.DelimitedAdapter``, ``comlrl_lightning.tasks.HFDataset``...), the round
pipeline and its run state :mod:`comlrl_lightning.rounds` (``comlrl_lightning.rounds.CurrentReplay``,
``comlrl_lightning.rounds.PreferencePair``...), the contracts :mod:`comlrl_lightning.contracts`, the
loaders :mod:`comlrl_lightning.datamodules.loaders`. Each old module path
(``comlrl_lightning.data.replay``...) is a module here that re-exports its new home.

Imports: the modules it re-exports; nothing in the package imports it.
"""

from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayBuffer,
    ReplayRule,
)
from comlrl_lightning.tasks.centralized_task import (
    CentralizedAdapter,
    CentralizedComparatorParseError,
    CentralizedTask,
    DelimitedAdapter,
    TaggedCentralizedComparatorAdapter,
)
from comlrl_lightning.tasks.item_sources import HFDataset, ItemSet
from comlrl_lightning.tasks.oracle import Oracle
from comlrl_lightning.tasks.task import Task, TaskOptions

__all__ = [
    "AllHistoryReplay",
    "CentralizedAdapter",
    "CentralizedComparatorParseError",
    "CentralizedTask",
    "CurrentReplay",
    "DelimitedAdapter",
    "HFDataset",
    "ItemSet",
    "LambdaDecayReplay",
    "NearestKReplay",
    "Oracle",
    "PreferencePair",
    "ReplayBuffer",
    "ReplayRule",
    "TaggedCentralizedComparatorAdapter",
    "Task",
    "TaskOptions",
]
