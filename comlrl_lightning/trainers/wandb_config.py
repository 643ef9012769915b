"""The reference's ``wandb_config`` dict as Lightning loggers, and the output folder it implies."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Dict, List

from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger

from comlrl_lightning.options import require

WANDB_KEYS = (
    "project",
    "entity",
    "name",
    "run_name",
    "dir",
    "tags",
    "id",
    "resume",
    "mode",
    "output_dir",
    "config_sections",
)


def output_base(wandb_config: Dict[str, Any]) -> Path:
    """Where a run writes (logs, round files, snapshots, checkpoints), as the reference resolves it:
    ``output_dir``, else ``config_sections.output.base_dir``, else ``dir``, else the working directory."""
    unknown = sorted(set(wandb_config) - set(WANDB_KEYS))
    require(not unknown, f"wandb_config: unknown key(s) {', '.join(unknown)} (known: {', '.join(WANDB_KEYS)}).")
    sections = wandb_config.get("config_sections") or {}
    base = wandb_config.get("output_dir") or (sections.get("output") or {}).get("base_dir") or wandb_config.get("dir")
    return Path(base or os.getcwd()).absolute()


def logger_from_wandb_config(wandb_config: Dict[str, Any], output_dir: Path, args: Any) -> List[Logger]:
    """A CSV logger (``<output_dir>/lightning_logs/version_N/metrics.csv``) and, when ``wandb_config``
    names a project or run, a ``WandbLogger`` with the config's fields and ``args`` as its config.

    The W&B key is read by wandb from its own environment (``WANDB_API_KEY``); ``mode="offline"``
    (or ``WANDB_MODE=offline``) runs without a login.
    """
    loggers: List[Logger] = [CSVLogger(save_dir=str(output_dir))]
    if not any(key in wandb_config for key in ("project", "entity", "name", "run_name", "id")):
        return loggers
    options = {key: wandb_config[key] for key in ("project", "entity", "tags", "id", "resume") if key in wandb_config}
    wandb = WandbLogger(
        name=wandb_config.get("name") or wandb_config.get("run_name"),
        save_dir=str(wandb_config.get("dir") or output_dir),
        offline=wandb_config.get("mode") == "offline",
        **options,
    )
    sections = {key: value for key, value in (wandb_config.get("config_sections") or {}).items() if key != "output"}
    wandb.log_hyperparams(
        {**dataclasses.asdict(args), "algorithm": type(args).__name__.replace("Config", ""), **sections}
    )
    loggers.append(wandb)
    return loggers
