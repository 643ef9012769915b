"""The round pipeline, as plain Python: items and prompts, the oracle, pairs, replay, round files.

Task items and where they come from (:mod:`.task`, :mod:`.item_sources`), chat rendering
(:mod:`.chat`), the reward-function calling convention (:mod:`.oracle`), the centralized task and
its adapters (:mod:`.centralized_task`), sampling and pairing a collection (:mod:`.collection`),
the pair record (:mod:`.pairs`), multi-turn tasks (:mod:`.turns`: the transition and the return;
:mod:`.trajectories`: joint trajectories sampled turn by turn; :mod:`.trajectory_pairs`: their
pair record), replay rules and the replay buffer with its round files
(:mod:`.replay`, :mod:`.round_records`), resumable loaders (:mod:`.loaders`), policy snapshots for
the history comparator (:mod:`.snapshots`), and the written contract between a data module and
the team module it feeds (:mod:`.contract`). No Lightning hooks live here: the data modules in
:mod:`comlrl_lightning.datamodules` drive these pieces.

Imports: :mod:`comlrl_lightning.generation`, :mod:`comlrl_lightning.team`,
:mod:`comlrl_lightning.runtime` and the foundation modules; nothing above.
"""

from comlrl_lightning.data.centralized_task import (
    CentralizedAdapter,
    CentralizedComparatorParseError,
    CentralizedTask,
    DelimitedAdapter,
    TaggedCentralizedComparatorAdapter,
)
from comlrl_lightning.data.item_sources import HFDataset, ItemSet
from comlrl_lightning.data.oracle import Oracle
from comlrl_lightning.data.pairs import PreferencePair
from comlrl_lightning.data.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayBuffer,
    ReplayRule,
)
from comlrl_lightning.data.task import Task, TaskOptions

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
