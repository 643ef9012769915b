"""Tasks: what a task is, and the built-in tasks a config names by import path.

The task definition, which every run has: :mod:`.task` (:class:`Task` and its options
:class:`TaskOptions`: where the items come from, how each agent is prompted, the oracle), where items
come from (:mod:`.item_sources`: Hugging Face datasets, :class:`ItemSet`; :mod:`.task_files`:
``.json``/``.jsonl`` files, read under the bounds of :mod:`.file_bounds`; :mod:`.held_out`: evaluation
items held out of one's own training items), chat rendering (:mod:`.chat`), the reward-function
calling convention and the reward range (:mod:`.oracle`), multi-turn tasks (:mod:`.turns`: the
transition between turns and the return), and the centralized form of a task with its adapters
(:mod:`.centralized_task`).

The built-in tasks are subpackages: :mod:`.coding` is cooperative code generation on HumanEval (or
any problems in its format): agent 0 writes a helper ``aux``, agent 1 the problem's function, which
may call it; the two are combined into one program, run against the problem's tests and scored in
levels.

Imports: the task definition imports :mod:`comlrl_lightning.team`, :mod:`comlrl_lightning.runtime`
and the foundation modules. A built-in task also imports the task definition, the contracts and, for
types only, :mod:`comlrl_lightning.modules`; nothing in the package imports a built-in task (it is
chosen by import path, as a user's own would be).
"""

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
    "CentralizedAdapter",
    "CentralizedComparatorParseError",
    "CentralizedTask",
    "DelimitedAdapter",
    "HFDataset",
    "ItemSet",
    "Oracle",
    "TaggedCentralizedComparatorAdapter",
    "Task",
    "TaskOptions",
]
