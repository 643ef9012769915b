"""What CoMLRL scripts import from ``comlrl.utils`` for the preference trainers, under the same names.

A script changes its imports by prefix only::

    from comlrl_lightning.utils import RewardProcessors              # was: from comlrl.utils import ...
    from comlrl_lightning.utils.reward_utils import set_reward_range # was: from comlrl.utils.reward_utils ...

The modules mirror the reference (CoMLRL)'s: :mod:`~comlrl_lightning.utils.reward_processor`
(``RewardProcessors``), :mod:`~comlrl_lightning.utils.reward_utils` (``set_reward_range``,
``resolve_reward_range``) and :mod:`~comlrl_lightning.utils.checkpoint` (``read_checkpoint_metadata``).

The code lives beside the seed API (:mod:`comlrl_lightning.trainers.reward_processor`,
:mod:`comlrl_lightning.trainers.reward_utils`); these modules re-export it under the reference's names.

Imports: the seed API's modules of those names and the checkpoint metadata; nothing in the package
imports it, only the users' scripts.
"""

from typing import Dict

from comlrl_lightning.trainers.reward_processor import RewardProcessors
from comlrl_lightning.trainers.reward_utils import resolve_reward_range, set_reward_range
from comlrl_lightning.utils.checkpoint import read_checkpoint_metadata

REFERENCE_NAMES: Dict[str, str] = {
    "reward_processor.RewardProcessors": "`scale(factor)` and `shift(value)`, picklable",
    "reward_utils.set_reward_range": "declares and checks `reward_func.reward_range`",
    "reward_utils.resolve_reward_range": "the declared range, `None` when none is declared",
    "checkpoint.read_checkpoint_metadata": "`version`, `trainer_class`, `sequence`, `run_id`, `wandb` of a checkpoint",
}
"""Every ``comlrl.utils`` name taken here (``module.name`` under ``comlrl_lightning.utils``), and a note."""


def markdown_table() -> str:
    """The utils as the documentation's table: the reference's import, this library's, the note."""
    rows = ["| CoMLRL import | here | |", "|---|---|---|"]
    for name, note in REFERENCE_NAMES.items():
        module, _, attribute = name.rpartition(".")
        rows.append(
            f"| `from comlrl.utils.{module} import {attribute}` (or `comlrl.utils`) "
            f"| `from comlrl_lightning.utils.{module} import {attribute}` (or `comlrl_lightning.utils`) | {note} |"
        )
    return "\n".join(rows)


__all__ = [
    "REFERENCE_NAMES",
    "RewardProcessors",
    "markdown_table",
    "read_checkpoint_metadata",
    "resolve_reward_range",
    "set_reward_range",
]
