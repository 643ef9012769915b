"""The reference (CoMLRL)'s W&B run under the seed API: its run config keys, its steps, its throttle.

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
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from lightning.pytorch.loggers import WandbLogger

from comlrl_lightning.runtime.compat import wandb_run_active

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

    if previous is not None and wandb.run is previous:
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


__all__ = [
    "ReferenceStepWandbLogger",
    "finish_runs",
    "reference_run_config",
    "should_log_train",
    "start_reference_logger",
]
