"""The names of :mod:`comlrl_lightning.tasks.item_sources` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.item_sources import (
    METADATA_LIMIT,
    SAVED_DATASET_FILES,
    DataFiles,
    DatasetItems,
    HFDataset,
    ItemSet,
    is_hf_dataset,
    load_dataset_items,
)

__all__ = [
    "DataFiles",
    "DatasetItems",
    "HFDataset",
    "ItemSet",
    "METADATA_LIMIT",
    "SAVED_DATASET_FILES",
    "is_hf_dataset",
    "load_dataset_items",
]
