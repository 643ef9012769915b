"""The names of :mod:`comlrl_lightning.checkpoints.assets` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.checkpoints.assets import (
    ASSET_SUFFIX,
    ASSETS_KEY,
    SAFE_PART,
    AssetError,
    CheckpointAssets,
    asset,
    asset_folder,
    checked_name,
    file_digest,
    place,
    remove_assets,
    tree_digests,
    write_assets,
)

__all__ = [
    "ASSETS_KEY",
    "ASSET_SUFFIX",
    "AssetError",
    "CheckpointAssets",
    "SAFE_PART",
    "asset",
    "asset_folder",
    "checked_name",
    "file_digest",
    "place",
    "remove_assets",
    "tree_digests",
    "write_assets",
]
