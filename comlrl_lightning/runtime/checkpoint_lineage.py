"""The names of :mod:`comlrl_lightning.checkpoints.lineage` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.checkpoints.lineage import (
    METADATA_KEY,
    Lineage,
    Progress,
    SeveralLinesError,
    lineage_of,
    on_line,
    require_one_line,
)

__all__ = ["Lineage", "METADATA_KEY", "Progress", "SeveralLinesError", "lineage_of", "on_line", "require_one_line"]
