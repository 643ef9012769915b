"""The names of :mod:`comlrl_lightning.tasks.centralized_task` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.centralized_task import (
    ADAPTER_OPTION,
    ROLE_TAG,
    AdapterError,
    CentralizedAdapter,
    CentralizedComparatorParseError,
    CentralizedOracle,
    CentralizedTask,
    DelimitedAdapter,
    TaggedCentralizedComparatorAdapter,
    escape_role_tags,
    joint_prompt,
    parse_roles,
    resolve_adapter,
)

__all__ = [
    "ADAPTER_OPTION",
    "AdapterError",
    "CentralizedAdapter",
    "CentralizedComparatorParseError",
    "CentralizedOracle",
    "CentralizedTask",
    "DelimitedAdapter",
    "ROLE_TAG",
    "TaggedCentralizedComparatorAdapter",
    "escape_role_tags",
    "joint_prompt",
    "parse_roles",
    "resolve_adapter",
]
