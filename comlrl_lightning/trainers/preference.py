"""The seed's Python API: ``MADPOTrainer``, ``MADPOIterTrainer``, ``MARLHFTrainer``, ``MARLHFIterTrainer``.

Code written for the reference (CoMLRL) runs with one changed import::

    from comlrl_lightning.trainers.preference import MADPOIterConfig, MADPOIterTrainer

    args = MADPOIterConfig(num_agents=2, preference_replay_mode="lambda_decay",
                           preference_replay_lambda=0.8, preference_replay_sample_size=256)
    trainer = MADPOIterTrainer(agent_model="embedded", args=args)
    trainer.train()

Each trainer builds this library's Lightning parts from the config (see
:mod:`comlrl_lightning.trainers.mapping`): a team module (:attr:`module`), a data module
(:attr:`datamodule`) and, in :meth:`train`, a ``lightning.Trainer`` (:attr:`trainer`) that runs
``fit``. The same run is a ``comlrl-lightning fit`` config, and the parts can go into any Lightning
project.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger

from comlrl_lightning.callbacks.reward_curve import RewardCurvePlot
from comlrl_lightning.comparators.credentials import check_config_has_no_key
from comlrl_lightning.data.centralized_task import (
    CentralizedAdapter as CentralizedComparatorAdapter,
)
from comlrl_lightning.data.centralized_task import (
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
)
from comlrl_lightning.data.item_sources import HFDataset, is_hf_dataset
from comlrl_lightning.data.oracle import resolve_callable
from comlrl_lightning.data.task import TaskOptions
from comlrl_lightning.datamodules.iterative import IterativePreferenceDataModule
from comlrl_lightning.datamodules.preference import PreferenceDataModule
from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.errors import ConfigurationError, ConfigurationTypeError
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.models.joint_reward import JointRewardModel
from comlrl_lightning.modules import MADPOModule, MARLHFModule
from comlrl_lightning.options import OptionError, require
from comlrl_lightning.runtime.checkpoint_metadata import read_checkpoint_metadata
from comlrl_lightning.runtime.compat import wandb_run_started
from comlrl_lightning.runtime.files import ensure_writable_folder
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.trainers import mapping
from comlrl_lightning.trainers.checkpoints import CheckpointMethods
from comlrl_lightning.trainers.configs import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl_lightning.trainers.wandb_config import logger_from_wandb_config, output_base

GENERATION_KWARGS = tuple(field.name for field in dataclasses.fields(GenerationSettings))
"""What ``train(**generation_kwargs)`` may override: the sampling settings."""

UNSUPPORTED_ARGUMENTS = {
    "external_transition": "multi-turn training is not supported here (num_turns must be 1)",
    "eval_logger": "log domain metrics from a Lightning Callback (e.g. on_validation_batch_end) instead",
    "eval_aggregator": "log domain metrics from a Lightning Callback (e.g. on_validation_batch_end) instead",
    "metrics_callback": "log domain metrics from a Lightning Callback (e.g. on_validation_batch_end) instead",
    "critics": "give one critic model as critic_model= (or args.critic_model_name)",
}
"""Constructor arguments of the reference this library does not take, and what to do instead."""


class _PreferenceTrainer(CheckpointMethods):
    """What the four trainers share: building the parts, ``train()``, ``save_model()`` and the
    checkpoint methods (:class:`~comlrl_lightning.trainers.checkpoints.CheckpointMethods`).

    The constructor takes the reference's arguments (models, tokenizer, datasets, reward function,
    formatters, ``args``). Beyond the reference it accepts import paths for ``reward_func``,
    ``reward_processor`` and formatters, ``.json``/``.jsonl`` paths and Hugging Face dataset names
    for the datasets, and ``agent_model="embedded"`` (the embedded tiny model with its toy task
    when no dataset is given, so runs need no downloads). Runs repeat exactly: every random
    stream derives from ``torch.initial_seed()`` at construction (seed it with ``torch.manual_seed``).
    """

    config_class: type = MADPOConfig
    module_class: type = MADPOModule
    iterative = False

    def __init__(
        self,
        agent_model: Any = None,
        agents: Optional[Sequence[Any]] = None,
        num_agents: int = 2,
        tokenizer: Any = None,
        model_config: Optional[Dict[str, Any]] = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        reward_func: Any = None,
        reward_processor: Any = None,
        formatters: Any = None,
        external_transition: Any = None,
        wandb_config: Optional[Dict[str, Any]] = None,
        eval_logger: Any = None,
        eval_aggregator: Any = None,
        args: Optional[MADPOConfig] = None,
        *,
        centralized_comparator_adapter: Any = None,
        **marlhf_arguments: Any,
    ) -> None:
        self.args = args if args is not None else self.config_class()
        self._refuse_unsupported(
            external_transition=external_transition,
            eval_logger=eval_logger,
            eval_aggregator=eval_aggregator,
            **marlhf_arguments,
        )
        self._check_team(num_agents, agent_model, agents)
        train_dataset, eval_dataset = _task_datasets(agent_model, train_dataset, eval_dataset, reward_func)
        mapping.warn_ignored(self.args)
        # args and wandb_config go to the W&B run and the checkpoints: no key's value anywhere in them
        check_config_has_no_key({"args": dataclasses.asdict(self.args), "wandb_config": dict(wandb_config or {})})
        self.seed = torch.initial_seed() % 2**32
        seed_everything(self.seed, verbose=False)
        self.wandb_config = dict(wandb_config or {})
        self.output_dir = output_base(self.wandb_config)
        self.module = self._build_module(
            agent_model,
            agents,
            tokenizer,
            model_config or {},
            centralized_comparator_adapter,
            marlhf_arguments.get("critic_model"),
        )
        self.datamodule = self._build_datamodule(
            centralized_comparator_adapter,
            TaskOptions(
                train_dataset=_items(train_dataset),
                eval_dataset=_items(eval_dataset),
                formatters=formatters,
                reward_func=reward_func,
                reward_processor=reward_processor,
            ),
        )
        self.trainer: Optional[Trainer] = None

    def _check_team(self, num_agents: int, agent_model: Any, agents: Optional[Sequence[Any]]) -> None:
        require(
            num_agents in (2, self.args.num_agents),
            f"num_agents ({num_agents}) must match args.num_agents ({self.args.num_agents}) (the role count).",
        )
        require(agent_model is not None or agents, "agent_model or agents is required.")
        require(
            agents or agent_model is None or isinstance(agent_model, (str, os.PathLike)),
            "agent_model must be a model name or path; pass model objects as agents=[...] with tokenizer=.",
        )

    def _build_datamodule(self, adapter: Any, task: TaskOptions) -> PreferenceDataModule:
        parts: Dict[str, Any] = {}
        if self.iterative:
            parts = dict(comparator=mapping.comparator_for(self.args, adapter), replay=mapping.replay_for(self.args))
        data_class = IterativePreferenceDataModule if self.iterative else PreferenceDataModule
        datamodule = data_class(task=task, seed=self.seed, **mapping.data_options(self.args), **parts)
        if getattr(self.args, "log_reward_distribution", False):
            from comlrl_lightning.callbacks.reward_distributions import (
                resolve_reward_range,
            )

            # the error now, before any model loads
            resolve_reward_range(resolve_callable(datamodule.reward_func, "reward_func"))
        return datamodule

    def _refuse_unsupported(self, **given: Any) -> None:
        """``args`` of another trainer's kind, a keyword the reference does not have (a ``TypeError``)
        and one it has that this library does not support are errors with the reason (never silently ignored)."""
        # MARLHFConfig and the iterative configs derive from MADPOConfig: each trainer takes its own kind only
        other_kinds = tuple(
            {MADPOConfig, MARLHFConfig, MADPOIterConfig, MARLHFIterConfig} - set(self.config_class.__mro__)
        )
        require(
            isinstance(self.args, self.config_class) and not isinstance(self.args, other_kinds),
            f"args must be a {self.config_class.__name__} (got {type(self.args).__name__}).",
        )
        marlhf_only = ("metrics_callback", "critic_model", "critics")
        for name in given:
            if (
                name in marlhf_only
                and self.module_class is not MARLHFModule
                or name not in UNSUPPORTED_ARGUMENTS
                and name not in marlhf_only
            ):
                raise ConfigurationTypeError(f"{type(self).__name__}() got an unexpected keyword argument {name!r}")
            if name in UNSUPPORTED_ARGUMENTS and given[name] is not None:
                raise OptionError(f"{name} is not supported: {UNSUPPORTED_ARGUMENTS[name]}.")

    def _build_module(self, agent_model, agents, tokenizer, model_config, adapter, critic_model):
        dtype = model_config.get("torch_dtype", model_config.get("dtype"))
        unknown = sorted(set(model_config) - {"torch_dtype", "dtype"})  # transformers picks the attention itself
        require(not unknown, f"model_config: {', '.join(unknown)} not supported (dtype / torch_dtype is).")
        sources: Dict[str, Any] = {"agent_model": str(agent_model)} if not agents else {"agents": list(agents)}
        objects = bool(agents) and not all(isinstance(a, (str, os.PathLike)) for a in agents)
        require(not objects or tokenizer is not None, "Tokenizer(s) must be provided when agents are model objects.")
        options = mapping.module_options(self.args, marlhf=self.module_class is MARLHFModule)
        if self.module_class is MARLHFModule:
            options["critic"] = mapping.critic_for(self.args, critic_model)
        if agents and self.args.collaboration_mode == "decentralized":
            require(
                len(list(agents)) == self.args.num_agents,
                f"num_agents ({self.args.num_agents}) must match the number of agents ({len(list(agents))}).",
            )
        dtype = str(dtype).replace("torch.", "") if dtype is not None else None
        return self.module_class(
            team=mapping.team_for(self.args, sources, tokenizer, dtype),
            collaboration=mapping.collaboration_for(self.args, adapter),
            seed=self.seed,
            **options,
        )

    # ------------------------------------------------------------------------------------------

    def train(
        self,
        resume_from_checkpoint: Optional[str] = None,
        checkpoint_dir: Optional[str] = None,
        checkpoint_interval: int = 1,
        checkpoint_total_limit: Optional[int] = None,
        **generation_kwargs: Any,
    ) -> None:
        """Run ``lightning.Trainer.fit``, writing ``checkpoint_dir/checkpoint-{N}`` at the reference's commits.

        A commit is the end of pair collection and of every epoch (base trainers) or the end of a
        round (iterative trainers); commit ``N`` is written every ``checkpoint_interval`` commits and
        at the last one, and ``checkpoint_total_limit`` keeps this run's newest ones (``None``: all).
        Each ``checkpoint-N`` carries the files it needs (see :mod:`comlrl_lightning.trainers.checkpoints`).
        ``resume_from_checkpoint`` is a ``checkpoint-N`` folder, a ``.ckpt`` file, or a folder of
        checkpoints (the one with the most progress); the run continues exactly where it stopped
        (raise ``num_iterations`` to extend a finished run), with the same logs and W&B run, and its
        checkpoints go on beside the one it resumed unless ``checkpoint_dir`` says otherwise.
        Checkpoint options may differ from the earlier parts of the run. ``generation_kwargs``
        override the sampling settings (``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``;
        ``do_sample=True`` is accepted).
        """
        plan = self.checkpoint_plan(resume_from_checkpoint, checkpoint_dir, checkpoint_interval, checkpoint_total_limit)
        self._apply_generation_kwargs(generation_kwargs)
        callbacks: List[Callback] = [RewardCurvePlot(), *plan.callbacks]
        if getattr(self.args, "log_reward_distribution", False):
            from comlrl_lightning.callbacks.reward_distributions import (
                RewardDistributions,
            )

            callbacks.append(RewardDistributions())
        verbose = self.wandb_config.get("config_sections", {}).get("output", {}).get("verbose", True)
        self.trainer = Trainer(
            accelerator="auto",
            devices=1,
            default_root_dir=str(self.output_dir),
            callbacks=callbacks,
            logger=logger_from_wandb_config(self.wandb_config, self.output_dir, self.args, plan.metadata),
            enable_checkpointing=plan.tracking,
            enable_progress_bar=bool(verbose),
            enable_model_summary=False,
            **mapping.trainer_options(self.args),
        )
        try:
            self.trainer.fit(self.module, self.datamodule, ckpt_path=plan.resume)
        finally:  # a W&B run is complete (and its offline record flushed) when train() returns
            for logger in self.trainer.loggers:
                if isinstance(logger, WandbLogger) and wandb_run_started(logger):
                    logger.experiment.finish()

    def evaluate(self) -> Dict[str, float]:
        """Evaluate the current policy on the evaluation items with the task reward (one joint sample
        per item, as in training's evaluations) and return the metrics, e.g. ``eval/turn_1/reward_mean``."""
        # no inference mode: tensors made under it (the team's buffers, metric states) could not be trained after
        trainer = Trainer(
            accelerator="auto",
            devices=1,
            default_root_dir=str(self.output_dir),  # an iterative data module's folders: the run's, not the cwd
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            inference_mode=False,
        )
        results = trainer.validate(self.module, self.datamodule, verbose=False)
        return {key: float(value) for key, value in (results[0] if results else {}).items()}

    def _apply_generation_kwargs(self, kwargs: Dict[str, Any]) -> None:
        if kwargs.pop("do_sample", True) is not True:
            raise OptionError("do_sample=False is not supported: preference collection samples.")
        unknown = sorted(set(kwargs) - set(GENERATION_KWARGS))
        require(
            not unknown,
            f"train(): generation option(s) {', '.join(unknown)} not supported "
            f"(supported: {', '.join(GENERATION_KWARGS)}, do_sample).",
        )
        if kwargs:
            self.module.generation_settings = dataclasses.replace(self.module.generation_settings, **kwargs)

    def save_model(self, output_dir: str) -> None:
        """Write ``output_dir/agent_{i}``: each agent's Hugging Face folder (``save_pretrained``) and tokenizer.

        Each folder is written beside its final name and renamed into place, so an interrupted save
        never leaves a half-written agent (nor its staging folder). An ``output_dir`` that is a file,
        or an ``agent_{i}`` there that is a link or a file, is refused before anything is written.
        The reward model is not saved (as the reference).
        """
        root = Path(require_local(output_dir, "save_model output_dir", "a local folder"))
        team = self.module.team
        targets = [root / f"agent_{index}" for index in range(len(team.agents))]
        for path in (root, *targets):
            if path.is_symlink() and path != root or path.exists() and not path.is_dir():
                kind = "a symbolic link" if path.is_symlink() else "a file"
                raise ConfigurationError(f"save_model: {path} is {kind}; it writes agent folders only into folders.")
        ensure_writable_folder(root, "save_model's output folder")
        for agent, tokenizer, target in zip(team.agents, team.tokenizers, targets):
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
            try:
                agent.save_pretrained(staging)
                tokenizer.save_pretrained(staging)
                if target.exists():
                    shutil.rmtree(target)
                os.replace(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)


def _task_datasets(agent_model: Any, train_dataset: Any, eval_dataset: Any, reward_func: Any) -> Tuple[Any, Any]:
    """The training and evaluation datasets, checked with the reward function; the embedded model
    without a dataset brings its toy task (and its reward)."""
    embedded = agent_model == EMBEDDED and train_dataset is None
    if embedded:
        train_dataset, eval_dataset = EMBEDDED, EMBEDDED if eval_dataset is None else eval_dataset
    require(train_dataset is not None, "train_dataset is required.")
    require(reward_func is not None or embedded, "reward_func must be a callable.")
    require(
        reward_func is None or callable(reward_func) or isinstance(reward_func, str),
        "reward_func must be a callable.",
    )
    return train_dataset, eval_dataset


def _items(dataset: Any) -> Any:
    """Datasets as the data module takes them: a ``datasets`` object as it is (the data module indexes
    it without copying), any other sequence of dicts as a list."""
    if dataset is None or isinstance(dataset, (str, os.PathLike, list, HFDataset)) or is_hf_dataset(dataset):
        return str(dataset) if isinstance(dataset, os.PathLike) else dataset
    return [dict(item) for item in dataset]


class MADPOTrainer(_PreferenceTrainer):
    """MADPO: pairs collected once by the team, then reference-free DPO on the joint margin."""

    config_class, module_class = MADPOConfig, MADPOModule


class MADPOIterTrainer(_PreferenceTrainer):
    """Iterative MADPO: ``num_iterations`` rounds of collect against a comparator -> replay -> DPO."""

    config_class, module_class, iterative = MADPOIterConfig, MADPOModule, True


class MARLHFTrainer(_PreferenceTrainer):
    """MARLHF: pairs, a joint reward model, then multi-agent RL on it (``critic_model=`` for maac/iac)."""

    config_class, module_class = MARLHFConfig, MARLHFModule


class MARLHFIterTrainer(_PreferenceTrainer):
    """Iterative MARLHF: per round, pairs against a comparator, a fresh reward model, then RL."""

    config_class, module_class, iterative = MARLHFIterConfig, MARLHFModule, True


__all__ = [
    "CentralizedComparatorAdapter",
    "CentralizedComparatorParseError",
    "JointRewardModel",
    "MADPOConfig",
    "MADPOIterConfig",
    "MADPOIterTrainer",
    "MADPOTrainer",
    "MARLHFConfig",
    "MARLHFIterConfig",
    "MARLHFIterTrainer",
    "MARLHFTrainer",
    "TaggedCentralizedComparatorAdapter",
    "read_checkpoint_metadata",
]
