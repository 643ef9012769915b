"""The reference's ``wandb_config`` dict as Lightning loggers, and the output folder it implies."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from lightning.pytorch.loggers import Logger

from comlrl_lightning.callbacks.csv_logger import ResumableCSVLogger, same_log_folder
from comlrl_lightning.runtime.hparams import plain
from comlrl_lightning.trainers.mapping import wandb_options
from comlrl_lightning.trainers.wandb_compat import reference_run_config, start_reference_logger
from comlrl_lightning.validation import require

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


def effective_sampling(module: Any) -> Dict[str, Any]:
    """The W&B config keys of what ``module`` samples with: ``max_new_tokens``, ``temperature``,
    ``top_p``, ``top_k`` (the config's fields, ``train(**generation_kwargs)`` applied), ``sampling``
    (those and ``extra``, every further ``generate()`` option) and ``generation_kwargs`` as given."""
    sampling = plain(module.generation_settings)
    named = {key: sampling[key] for key in ("max_new_tokens", "temperature", "top_p", "top_k")}
    return {**named, "sampling": sampling, "generation_kwargs": dict(module.hparams.get("generation_kwargs") or {})}


def logger_from_wandb_config(
    wandb_config: Dict[str, Any],
    output_dir: Path,
    args: Any,
    reference: Dict[str, Any],
    resumed: Optional[Dict[str, Any]] = None,
) -> List[Logger]:
    """A CSV logger (``<output_dir>/lightning_logs/version_N/metrics.csv``) and, when ``wandb_config``
    names a project or run, a W&B logger with the config's fields and the reference's run config
    (see :mod:`comlrl_lightning.trainers.wandb_compat`), every ``args`` field beside it.

    ``reference`` holds the run's ``model_name``, ``num_agents``, ``num_roles``, its ``env_step``
    (a callable), ``sampling`` (the settings the run samples with, ``train(**generation_kwargs)``
    applied, as config keys: they replace the ``args`` fields) and ``wandb_run`` (the run an earlier ``train()`` of the trainer left open, or ``None``). The W&B key is read by wandb from its own environment (``WANDB_API_KEY``);
    ``mode="offline"`` (or ``WANDB_MODE=offline``) runs without a login. ``resumed`` is the metadata
    of the checkpoint a run resumes
    (:func:`~comlrl_lightning.runtime.checkpoint_metadata.read_checkpoint_metadata`): the CSV log
    continues in its version folder (when it lies in this ``output_dir``), and the W&B run continues
    under its id unless ``wandb_config`` names an ``id`` or ``resume`` itself (as the reference).
    """
    logs = (resumed or {}).get("logs") or {}
    same_folder = same_log_folder(output_dir, "lightning_logs", logs)
    loggers: List[Logger] = [
        ResumableCSVLogger(save_dir=str(output_dir), version=logs["version"] if same_folder else None)
    ]
    if not any(key in wandb_config for key in ("project", "entity", "name", "run_name", "id")):
        return loggers
    options = {key: wandb_config[key] for key in ("project", "entity", "tags", "id", "resume") if key in wandb_config}
    identity = (resumed or {}).get("wandb")
    if identity and "id" not in wandb_config and "resume" not in wandb_config:
        options.update(id=identity["id"], resume="allow")
        for key in ("project", "entity"):
            if identity.get(key) and not options.get(key):
                options[key] = identity[key]
    init = dict(
        name=wandb_config.get("name") or wandb_config.get("run_name"),
        dir=str(wandb_config.get("dir") or output_dir),
        **({"mode": "offline"} if wandb_config.get("mode") == "offline" else {}),
        **options,
    )
    sections = dict(wandb_config.get("config_sections") or {})
    algorithm = type(args).__name__.replace("Config", "")
    run_config = reference_run_config(
        args, algorithm, reference["model_name"], reference["num_agents"], reference["num_roles"], sections
    )
    wandb = start_reference_logger(
        init,
        {**dataclasses.asdict(args), **run_config, **reference.get("sampling", {})},
        reference["env_step"],
        previous=reference.get("wandb_run"),
        **wandb_options(args),
    )
    loggers.append(wandb)
    return loggers
