"""The names of :mod:`comlrl_lightning.tasks.held_out` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.held_out import (
    HELD_OUT,
    HeldOutSize,
    ItemView,
    check_evaluation_source,
    check_held_out_size,
    held_out_count,
    held_out_split,
    split_summary,
)

__all__ = [
    "HELD_OUT",
    "HeldOutSize",
    "ItemView",
    "check_evaluation_source",
    "check_held_out_size",
    "held_out_count",
    "held_out_split",
    "split_summary",
]
