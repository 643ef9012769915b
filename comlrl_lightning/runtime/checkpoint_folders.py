"""The names of :mod:`comlrl_lightning.checkpoints.folders` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.checkpoints.folders import (
    OWNER_FILE,
    OWNER_LIMIT,
    WRITTEN,
    CheckpointFolderError,
    Owned,
    check_destination,
    check_replaceable,
    checkpoint_folder,
    checkpoint_folders,
    folder_beside,
    owned_by,
    owner_of,
    prune_folders,
    read_owner,
    remove_written,
    save_checkpoint_folder,
)

__all__ = [
    "CheckpointFolderError",
    "OWNER_FILE",
    "OWNER_LIMIT",
    "Owned",
    "WRITTEN",
    "check_destination",
    "check_replaceable",
    "checkpoint_folder",
    "checkpoint_folders",
    "folder_beside",
    "owned_by",
    "owner_of",
    "prune_folders",
    "read_owner",
    "remove_written",
    "save_checkpoint_folder",
]
