"""The names of :mod:`comlrl_lightning.tasks.task` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.task import (
    EMBEDDED_REWARD,
    FormatterSpec,
    ItemSource,
    Task,
    TaskOptions,
    TemplateFormatter,
    check_items,
    check_prompts_fit,
    default_formatter,
    embedded_formatters,
    load_items,
    resolve_formatter,
)

__all__ = [
    "EMBEDDED_REWARD",
    "FormatterSpec",
    "ItemSource",
    "Task",
    "TaskOptions",
    "TemplateFormatter",
    "check_items",
    "check_prompts_fit",
    "default_formatter",
    "embedded_formatters",
    "load_items",
    "resolve_formatter",
]
