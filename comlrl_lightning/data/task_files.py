"""The names of :mod:`comlrl_lightning.tasks.task_files` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.task_files import (
    COMPRESSED_SUFFIXES,
    deepest_nesting,
    longest_integer,
    read_json,
    read_jsonl,
    task_file_format,
)

__all__ = ["COMPRESSED_SUFFIXES", "deepest_nesting", "longest_integer", "read_json", "read_jsonl", "task_file_format"]
