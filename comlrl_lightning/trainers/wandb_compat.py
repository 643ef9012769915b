"""The reference (CoMLRL)'s ``wandb_config`` and W&B run under the seed API: its output folder, its run
config keys, its steps, its throttle.

Dashboards built on a CoMLRL run keep working on a run of the seed API:

* the run config has the reference's keys (:func:`reference_run_config`: ``model_name``,
  ``num_agents``, ``num_turns``, ``algorithm``, ``advantage_mode``... and every
  ``config_sections`` entry); this library's own (every config field, the modules' options) are
  logged beside them;
* every metric is logged at the reference's W&B step, ``env_step``
  (:class:`~comlrl_lightning.trainers.environment_steps.EnvironmentSteps`), with Lightning's
  ``trainer/global_step`` beside it; the metric names are the reference's (``turn_1/*``,
  ``eval/turn_1/*``, ``iter/*``), this library's others (``train/loss``...) come too;
* training metrics are throttled as the reference's: logged when ``env_step`` moved at least
  ``logging_steps`` since the last logged ones (and the first time).

A CSV log (``<output_dir>/lightning_logs/version_N/metrics.csv``) is written beside it, or alone
when ``wandb_config`` names no project or run (:func:`logger_from_wandb_config`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from lightning.pytorch.loggers import Logger, WandbLogger

from comlrl_lightning.callbacks.csv_logger import ResumableCSVLogger, same_log_folder
from comlrl_lightning.runtime.compat import wandb_run_active
from comlrl_lightning.runtime.hparams import plain
from comlrl_lightning.trainers.mapping import SAMPLING_FIELDS, wandb_options
from comlrl_lightning.validation import require

TRAIN_METRIC = "turn_1/reward_mean"
"""A training step's metrics are the ones that carry it (evaluations log ``eval/...``, rounds ``iter/...``)."""


def reference_run_config(
    args: Any, algorithm: str, model_name: Optional[str], num_agents: int, num_roles: int, sections: Dict[str, Any]
) -> Dict[str, Any]:
    """The run config the reference gives ``wandb.init``, key for key (``config_sections`` entries
    merged in, and their ``dataset.name`` / ``dataset.type`` as ``dataset_name`` / ``dataset_type``)."""
    config: Dict[str, Any] = {
        "model_name": model_name,
        "num_agents": num_agents,
        "num_turns": args.num_turns,
        "algorithm": algorithm,
        "advantage_mode": args.advantage_mode,
        "advantage_normalization": args.advantage_normalization,
        "reference_kl_enabled": bool(args.reference_kl_enabled),
        "reference_kl_coef": float(args.reference_kl_coef),
        "reference_devices": args.reference_devices,
        "agent_learning_rate": args.agent_learning_rate,
        "num_train_epochs": args.num_train_epochs,
        "max_new_tokens": args.max_new_tokens,
    }
    if hasattr(args, "num_generations"):
        config["num_generations"] = args.num_generations
    if args.collaboration_mode == "centralized":
        config.update(collaboration_mode="centralized", num_roles=num_roles, num_actor_models=num_agents)
        if hasattr(args, "comparator_generation_mode"):
            config["comparator_generation_mode"] = "centralized"
    config.update(sections)
    dataset = sections.get("dataset")
    if isinstance(dataset, dict):
        config.update({f"dataset_{key}": dataset[key] for key in ("name", "type") if dataset.get(key)})
    return config


def should_log_train(step: int, last: Optional[int], logging_steps: int) -> bool:
    """The reference's throttle: log when ``logging_steps <= 1``, the first time, or when
    ``step - last >= logging_steps``."""
    return logging_steps <= 1 or last is None or step - last >= logging_steps


class ReferenceStepWandbLogger(WandbLogger):
    """A ``WandbLogger`` that logs at the reference's step (``env_step()``), throttles training
    metrics by ``logging_steps`` environment steps, and keeps ``trainer/global_step`` as a metric.

    Args:
        env_step: the current environment step (read at every log call).
        logging_steps: the reference's ``logging_steps``.
        **options: ``WandbLogger``'s.
    """

    def __init__(self, env_step: Callable[[], int], logging_steps: int = 1, **options: Any) -> None:
        super().__init__(**options)
        self.env_step, self.logging_steps = env_step, logging_steps
        self.last_train_step: Optional[int] = None

    def log_metrics(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        env_step = int(self.env_step())
        if TRAIN_METRIC in metrics:
            if not should_log_train(env_step, self.last_train_step, self.logging_steps):
                return
            self.last_train_step = env_step
        values = dict(metrics)
        if step is not None:
            values["trainer/global_step"] = step
        self.experiment.log(values, step=env_step)


def start_reference_logger(
    init: Dict[str, Any],
    run_config: Dict[str, Any],
    env_step: Callable[[], int],
    logging_steps: int,
    previous: Optional[Any] = None,
) -> ReferenceStepWandbLogger:
    """Start a W&B run with ``wandb.init(**init, config=run_config)`` (or continue ``previous``, this
    trainer's run an earlier ``train()`` left open, as the reference keeps one run per trainer) and
    wrap it in a :class:`ReferenceStepWandbLogger`. Another trainer's run still open is finished
    first, as ``wandb.init`` does in a script.

    The run is started here rather than by Lightning so that its default x-axis stays W&B's step,
    which is ``env_step`` as in the reference (Lightning would make it ``trainer/global_step``).
    """
    import wandb

    # `previous is not None` last: the `is` test narrows `previous` to wandb.run's type, which may be None
    if wandb.run is previous and previous is not None:
        run = previous
        run.config.update(run_config, allow_val_change=True)
    else:
        if wandb.run is not None:
            wandb.run.finish()
        run = wandb.init(**init, config=run_config)
    return ReferenceStepWandbLogger(
        env_step, logging_steps, experiment=run, save_dir=init.get("dir"), name=init.get("name")
    )


def finish_runs(loggers: Sequence[Any], final_model_saved: Optional[str] = None) -> None:
    """Finish the W&B runs among ``loggers`` that are still running, first logging
    ``final_model_saved`` (the folder ``save_model`` wrote) when given, as the reference's ``save_model``."""
    for logger in loggers:
        if isinstance(logger, WandbLogger) and wandb_run_active(logger):
            if final_model_saved is not None:
                logger.experiment.log({"final_model_saved": final_model_saved})
            logger.experiment.finish()


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
    named = {key: sampling[key] for key in SAMPLING_FIELDS}
    return {**named, "sampling": sampling, "generation_kwargs": dict(module.hparams.get("generation_kwargs") or {})}


def logger_from_wandb_config(
    wandb_config: Dict[str, Any],
    output_dir: Path,
    args: Any,
    reference: Dict[str, Any],
    resumed: Optional[Dict[str, Any]] = None,
) -> List[Logger]:
    """A CSV logger and, when ``wandb_config`` names a project or run, a W&B logger with the config's
    fields and the reference's run config, every ``args`` field beside it (see the module docstring).

    ``reference`` holds the run's ``model_name``, ``num_agents``, ``num_roles``, its ``env_step``
    (a callable), ``sampling`` (the settings the run samples with, ``train(**generation_kwargs)``
    applied, as config keys: they replace the ``args`` fields) and ``wandb_run`` (the run an earlier ``train()`` of the trainer left open, or ``None``). The W&B key is read by wandb from its own environment (``WANDB_API_KEY``);
    ``mode="offline"`` (or ``WANDB_MODE=offline``) runs without a login. ``resumed`` is the metadata
    of the checkpoint a run resumes
    (:func:`~comlrl_lightning.checkpoints.metadata.read_checkpoint_metadata`): the CSV log
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
    options: Dict[str, Any] = {
        key: wandb_config[key] for key in ("project", "entity", "tags", "id", "resume") if key in wandb_config
    }
    identity = (resumed or {}).get("wandb")
    if identity and "id" not in wandb_config and "resume" not in wandb_config:
        options.update(id=identity["id"], resume="allow")
        for key in ("project", "entity"):
            if identity.get(key) and not options.get(key):
                options[key] = identity[key]
    init: Dict[str, Any] = dict(
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


__all__ = [
    "ReferenceStepWandbLogger",
    "effective_sampling",
    "finish_runs",
    "logger_from_wandb_config",
    "output_base",
    "reference_run_config",
    "should_log_train",
    "start_reference_logger",
]
