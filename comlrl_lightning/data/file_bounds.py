"""The names of :mod:`comlrl_lightning.tasks.file_bounds` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.file_bounds import (
    CHUNK,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_RATIO,
    MAGIC_NUMBERS,
    RATIO_AFTER,
    SOURCE_REMEDY,
    TASK_FILE_REMEDY,
    FileBounds,
    check_data_files,
    compression_of,
    human_size,
    local_files_under,
    read_data_file,
)

__all__ = [
    "CHUNK",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_RATIO",
    "FileBounds",
    "MAGIC_NUMBERS",
    "RATIO_AFTER",
    "SOURCE_REMEDY",
    "TASK_FILE_REMEDY",
    "check_data_files",
    "compression_of",
    "human_size",
    "local_files_under",
    "read_data_file",
]
