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
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger

from comlrl_lightning.callbacks.reward_curve import RewardCurvePlot
from comlrl_lightning.checkpoints.io import atomic_checkpoint_plugins
from comlrl_lightning.checkpoints.metadata import load_checkpoint_dict, read_checkpoint_metadata, resumable
from comlrl_lightning.checkpoints.resume_rule import apply_resume_rule
from comlrl_lightning.datamodules.iterative import IterativePreferenceDataModule
from comlrl_lightning.datamodules.preference import PreferenceDataModule
from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.joint_reward import JointRewardModel
from comlrl_lightning.modules import MADPOModule, MARLHFModule
from comlrl_lightning.runtime.compat import wandb_run_active
from comlrl_lightning.runtime.hparams import set_hyperparameter
from comlrl_lightning.runtime.progress import progress_callbacks
from comlrl_lightning.runtime.quiet import install_noise_filters
from comlrl_lightning.runtime.threads import ThreadDefaults
from comlrl_lightning.tasks.centralized_task import (
    CentralizedAdapter as CentralizedComparatorAdapter,
)
from comlrl_lightning.tasks.centralized_task import (
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
)
from comlrl_lightning.tasks.item_sources import HFDataset, is_hf_dataset
from comlrl_lightning.tasks.oracle import resolve_callable, resolve_reward_range
from comlrl_lightning.tasks.task import TaskOptions
from comlrl_lightning.team.saving import save_team_folders
from comlrl_lightning.trainers import mapping
from comlrl_lightning.trainers.arguments import check_argument_types, check_arguments, refuse_saved_keys, turns_for
from comlrl_lightning.trainers.attributes import (
    MARLHFAttributes,
    ReferenceAttributes,
    reference_task,
)
from comlrl_lightning.trainers.checkpoints import CheckpointMethods, saved_generation_kwargs
from comlrl_lightning.trainers.configs import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl_lightning.trainers.environment_steps import environment_steps_for
from comlrl_lightning.trainers.eval_callbacks import ReferenceCallbacks, evaluate_now
from comlrl_lightning.trainers.wandb_compat import (
    effective_sampling,
    finish_runs,
    logger_from_wandb_config,
    output_base,
)
from comlrl_lightning.validation import OptionError, require


class _PreferenceTrainer(ReferenceAttributes, CheckpointMethods):
    """What the four trainers share: building the parts, ``train()``, ``evaluate()``, ``save_model()``,
    the reference's attributes (:class:`~comlrl_lightning.trainers.attributes.ReferenceAttributes`)
    and the checkpoint methods (:class:`~comlrl_lightning.trainers.checkpoints.CheckpointMethods`).

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
        install_noise_filters()  # a seed-API script's entry point: Lightning's harmless notices off (runtime/quiet.py)
        self.args = args if args is not None else self.config_class()
        given = dict(external_transition=external_transition, **marlhf_arguments)
        check_arguments(type(self).__name__, self.config_class, self.args, self.module_class is MARLHFModule, given)
        check_argument_types(num_agents, wandb_config, model_config)
        self._check_team(num_agents, agent_model, agents, tokenizer)
        train_dataset, eval_dataset = _task_datasets(agent_model, train_dataset, eval_dataset, reward_func)
        mapping.warn_ignored(self.args)
        refuse_saved_keys(self.args, wandb_config, model_config, agent_model, agents, given)
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
            {key: given.get(key) for key in ("critic_model", "critics")},
        )
        self.datamodule = self._build_datamodule(
            centralized_comparator_adapter,
            TaskOptions(
                train_dataset=_items(train_dataset),
                eval_dataset=_items(eval_dataset),
                formatters=formatters,
                reward_func=reward_func,
                reward_processor=reward_processor,
                turns=turns_for(self.args, external_transition),
            ),
        )
        self.task = reference_task(self.datamodule, self.module, tokenizer)  # checked now, as the reference
        self.model_source = agent_model if not agents else list(agents)[0]
        self.environment_steps = environment_steps_for(self.args)
        self.reference_callbacks = ReferenceCallbacks(eval_logger, eval_aggregator, given.get("metrics_callback"))
        self.reference_callbacks.install(self.module, mapping.actor_critic(self.args))
        self.trainer: Optional[Trainer] = None

    def _check_team(self, num_agents: int, agent_model: Any, agents: Optional[Sequence[Any]], tokenizer: Any) -> None:
        if self.args.collaboration_mode == "centralized":  # the reference's checks, in its order
            require(agents is None or len(agents) == 1, "Centralized collaboration requires exactly one actor model.")
            require(
                not isinstance(tokenizer, (list, tuple)) or len(tokenizer) == 1,
                "Centralized collaboration requires one actor tokenizer.",
            )
        require(
            num_agents in (2, self.args.num_agents),
            f"num_agents must match args.num_agents (the role count). Got {num_agents} and {self.args.num_agents}.",
        )
        require(agent_model is not None or bool(agents), "Either agent_model or agents must be provided.")
        require(
            bool(agents) or agent_model is None or isinstance(agent_model, (str, os.PathLike)),
            "agent_model should be a string to create homogeneous agents (model objects go in agents=[...] with tokenizer=).",
        )

    def _build_datamodule(self, adapter: Any, task: TaskOptions) -> PreferenceDataModule:
        parts: Dict[str, Any] = {}
        if self.iterative:
            parts = dict(comparator=mapping.comparator_for(self.args, adapter), replay=mapping.replay_for(self.args))
        data_class = IterativePreferenceDataModule if self.iterative else PreferenceDataModule
        datamodule = data_class(task=task, seed=self.seed, **mapping.data_options(self.args), **parts)
        if getattr(self.args, "log_reward_distribution", False):
            from comlrl_lightning.callbacks.reward_distributions import REQUIRED_BY

            # the error now, before any model loads
            resolve_reward_range(resolve_callable(datamodule.reward_func, "reward_func"), required_by=REQUIRED_BY)
        return datamodule

    def _build_module(self, agent_model, agents, tokenizer, model_config, adapter, critic_arguments):
        sources: Dict[str, Any] = {"agent_model": str(agent_model)} if not agents else {"agents": list(agents)}
        objects = bool(agents) and not all(isinstance(a, (str, os.PathLike)) for a in agents)
        require(not objects or tokenizer is not None, "Tokenizer(s) must be provided when agents are model objects.")
        options = mapping.module_options(self.args, marlhf=self.module_class is MARLHFModule)
        if self.module_class is MARLHFModule:
            options["critic"] = mapping.critic_for(self.args, **critic_arguments)
        if agents and self.args.collaboration_mode == "decentralized":
            require(
                len(list(agents)) == self.args.num_agents,
                f"num_agents ({self.args.num_agents}) must match the number of agents ({len(list(agents))}).",
            )
        return self.module_class(
            team=mapping.team_for(self.args, sources, tokenizer, model_config),
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
        at the last one, and ``checkpoint_total_limit`` keeps this run's newest ones (``None``: all;
        :mod:`comlrl_lightning.trainers.checkpoints`). ``resume_from_checkpoint`` is a
        ``checkpoint-N`` folder, a ``.ckpt`` file, or a folder of checkpoints (the one with the most
        progress); the run continues exactly where it stopped (raise ``num_iterations`` to extend a
        finished run), with the same logs and W&B run, its checkpoints beside the one it resumed
        unless ``checkpoint_dir`` says otherwise (checkpoint options may differ between the parts of a
        run). ``generation_kwargs`` go to every sampler as the
        reference forwards them to Hugging Face ``generate()``: ``max_new_tokens``,
        ``temperature``, ``top_p`` and ``top_k`` replace the config's, any other ``generate()``
        option is passed on (the vLLM generator maps those vLLM supports and refuses the rest by
        name); ``do_sample=True`` is accepted. They are saved in checkpoints: a resume given none
        continues with the saved ones, one given some uses exactly those.
        """
        plan = self.checkpoint_plan(resume_from_checkpoint, checkpoint_dir, checkpoint_interval, checkpoint_total_limit)
        loaded = resumable(load_checkpoint_dict(plan.resume), plan.resume) if plan.resume else None
        saved = saved_generation_kwargs(loaded, plan.resume) if loaded is not None else None
        self._apply_generation_kwargs(generation_kwargs, saved)
        if loaded is not None:  # the resume rule: this run's options; a fixed one changed is refused now
            apply_resume_rule(loaded, self.module, self.datamodule, plan.resume)
        callbacks: List[Callback] = [RewardCurvePlot(), self.environment_steps, *plan.callbacks, ThreadDefaults()]
        callbacks += self.reference_callbacks.observers(mapping.actor_critic(self.args))
        if getattr(self.args, "log_reward_distribution", False):
            from comlrl_lightning.callbacks.reward_distributions import (
                RewardDistributions,
            )

            callbacks.append(RewardDistributions())
        verbose = self.wandb_config.get("config_sections", {}).get("output", {}).get("verbose", True)
        callbacks += progress_callbacks(bool(verbose), callbacks)  # lines, not a bar, in a log file
        self.trainer = Trainer(
            accelerator="auto",
            devices=1,
            default_root_dir=str(self.output_dir),
            callbacks=callbacks,
            logger=logger_from_wandb_config(
                self.wandb_config, self.output_dir, self.args, self._run_identity(), plan.metadata
            ),
            enable_checkpointing=plan.tracking,
            enable_progress_bar=bool(verbose),
            enable_model_summary=False,
            plugins=atomic_checkpoint_plugins(),  # checkpoints written atomically with their files, as the command line's
            **mapping.trainer_options(self.args),
        )
        try:
            self.trainer.fit(self.module, self.datamodule, ckpt_path=plan.resume)
        except BaseException:  # a failed run's W&B record is complete; a finished one stays open, as the reference's
            finish_runs(self.trainer.loggers)
            raise

    def _run_identity(self) -> Dict[str, Any]:
        """What the W&B run config and steps need from the trainer (see :mod:`~comlrl_lightning.trainers.wandb_compat`)."""
        return dict(
            model_name=self.model_name,
            num_agents=self.num_agents,
            num_roles=self.module.num_roles,
            env_step=lambda: self.environment_steps.env_step,
            sampling=effective_sampling(self.module),
            wandb_run=self.wandb_run(),
        )

    def wandb_run(self) -> Any:
        """The W&B run of the last ``train()`` while it is open (``None`` without one)."""
        for logger in self.trainer.loggers if self.trainer is not None else []:
            if isinstance(logger, WandbLogger) and wandb_run_active(logger):
                return logger.experiment
        return None

    def evaluate(self, num_eval_samples: Optional[int] = None) -> Dict[str, float]:
        """Evaluate the current policy now and return the metrics it logged: one joint sample per
        evaluation item (the first ``num_eval_samples``, default ``args.eval_num_samples``) scored with
        the task reward (``eval/turn_1/reward_mean``, ``eval/turn_1/expected_return``), and ``eval/<key>``
        from ``eval_logger`` + ``eval_aggregator`` (for every trainer, as the reference's ``evaluate()``).
        After ``train()`` the metrics go to its logs too, at its last step."""
        return evaluate_now(self, num_eval_samples)

    def _apply_generation_kwargs(self, kwargs: Dict[str, Any], saved: Optional[Dict[str, Any]] = None) -> None:
        """``train(**generation_kwargs)`` onto the config's sampling settings (see :meth:`train`), saved
        as the module's ``sampling`` and ``generation_kwargs`` hparams."""
        if kwargs.pop("do_sample", True) is not True:
            raise OptionError("do_sample=False is not supported: preference collection samples.")
        kwargs = dict(kwargs) if kwargs or not saved else dict(saved)
        named = {key: kwargs[key] for key in mapping.SAMPLING_FIELDS if key in kwargs}
        extra = {key: value for key, value in kwargs.items() if key not in mapping.SAMPLING_FIELDS} or None
        base = GenerationSettings(**{key: getattr(self.args, key) for key in mapping.SAMPLING_FIELDS})
        self.module.use_sampling(dataclasses.replace(base, **named, extra=extra))
        set_hyperparameter(self.module, "generation_kwargs", kwargs)

    def save_model(self, output_dir: str) -> None:
        """Write ``output_dir/agent_{i}``: each agent's Hugging Face folder and tokenizer, written
        atomically (:func:`~comlrl_lightning.team.saving.save_team_folders`; a LoRA agent merged, and
        its adapter alone in ``adapter/``). The reward model is not saved (as the reference)."""
        save_team_folders(self.module.team, output_dir)
        if self.trainer is not None:  # as the reference: the W&B run ends with the saved model
            finish_runs(self.trainer.loggers, final_model_saved=str(output_dir))


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


class MARLHFTrainer(MARLHFAttributes, _PreferenceTrainer):
    """MARLHF: pairs, a joint reward model, then multi-agent RL on it (``critic_model=`` for maac/iac)."""

    config_class, module_class = MARLHFConfig, MARLHFModule


class MARLHFIterTrainer(MARLHFAttributes, _PreferenceTrainer):
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
