"""TeamModule: what every team-training LightningModule shares (team, sampling, evaluation)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union, cast

import torch
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torchmetrics import MeanMetric

from comlrl_lightning.checkpoints.resume_rule import TEAM_KEY, apply_resume_rule, module_layout, use_learning_rates
from comlrl_lightning.contracts import TrainsOn, data_side, optional_data_side
from comlrl_lightning.generation.base import GenerationSettings, Generator
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.modules.collaboration import Collaboration, Decentralized
from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples, renew_inference_states
from comlrl_lightning.modules.evaluation_runs import EvaluationRuns
from comlrl_lightning.modules.optim import adamw
from comlrl_lightning.modules.real_model_safety import low_precision_weights_warning, real_model_learning_rates
from comlrl_lightning.modules.turn_evaluation import (
    RETURN_KEY,
    RETURN_MEAN_KEY,
    TURN_1_KEY,
    Evaluator,
    TeamSampling,
    headline_key,
)
from comlrl_lightning.runtime.compat import attached_trainer
from comlrl_lightning.runtime.devices import resolve_devices
from comlrl_lightning.runtime.distributed import gather_objects, rank_and_world, shard
from comlrl_lightning.runtime.files import check_log_files
from comlrl_lightning.runtime.hparams import PlainHyperparameters, builtin_values, set_hyperparameter
from comlrl_lightning.runtime.paths import confine_checkpoint_callbacks
from comlrl_lightning.runtime.progress import Progress
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.runtime.sharding import check_strategy, is_sharded
from comlrl_lightning.tasks.task import Task
from comlrl_lightning.team.lora import agent_parameters
from comlrl_lightning.team.options import TeamOptions
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import positive, require

NOT_HYPERPARAMETERS = ["optimizer", "lr_scheduler", "generator", "critic", "collaboration"]
"""Objects, not values: left out of ``hparams`` (LightningCLI saves the whole config anyway)."""


class TeamModule(EvaluationRuns, PlainHyperparameters, LightningModule):
    """A team of N causal-LM agents with sampling settings and task-reward evaluation.

    Correct under a plain ``Trainer()``, which it never changes: it evaluates the team itself before
    the first update, so its validation steps do nothing in Lightning's sanity check (which the
    command line and the seed API switch off); the data module's callbacks come through
    :meth:`configure_callbacks`.

    Args:
        team: the agents (:class:`~comlrl_lightning.team.TeamOptions`): ``agent_model`` or
            ``agents``, ``num_agents``, tokenizers, ``dtype``, ``agent_devices``, ``lora`` (a
            ``peft.LoraConfig``), ``lora_one_pass`` (a LoRA team's agents in one pass of its base)
            and ``memory`` (activation checkpointing, the fused LM head).
        agent_learning_rate: learning rate, one for all agents or one per agent (each agent is one
            parameter group of the optimizer).
        optimizer: the optimizer class over the agents' parameter groups (``None``: AdamW with its
            default weight decay, as the reference, fused where torch has the kernel); e.g.
            ``torch.optim.SGD`` with its own ``init_args`` (``weight_decay`` among them). The groups'
            ``lr`` comes from ``agent_learning_rate``.
        lr_scheduler: an optional learning-rate scheduler class over that optimizer, stepped every
            epoch (e.g. ``torch.optim.lr_scheduler.LinearLR``).
        sampling: what to sample (:class:`~comlrl_lightning.generation.GenerationSettings`:
            ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``) in collection, comparators,
            evaluation and rollouts.
        generator: the generation backend (``None``: :class:`~comlrl_lightning.generation.HFGenerator`,
            Hugging Face ``generate()``); collection, comparators, evaluation and rollouts sample with it.
        collaboration: how the team covers the roles: :class:`~comlrl_lightning.modules.Decentralized`
            (``None``: one agent per role) or :class:`~comlrl_lightning.modules.Centralized`
            (one model writes every role in one joint completion).
        seed: seed of the evaluation (:mod:`~comlrl_lightning.modules.evaluation_runs`) and rollout streams.
    """

    def __init__(
        self,
        team: TeamOptions = TeamOptions(),
        agent_learning_rate: Union[float, List[float]] = 5e-6,
        optimizer: Optional[OptimizerCallable] = None,
        lr_scheduler: Optional[LRSchedulerCallable] = None,
        sampling: GenerationSettings = GenerationSettings(),
        generator: Optional[Generator] = None,
        collaboration: Optional[Collaboration] = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.collaboration = collaboration if collaboration is not None else Decentralized()
        self.team_options = team
        self.agent_sources = team.sources(self.collaboration.centralized)
        self.num_roles = self._roles(team)
        self.learning_rates = real_model_learning_rates(
            self._learning_rates(agent_learning_rate), self.agent_sources, team.lora is not None
        )
        self.agent_devices = None
        if team.agent_devices is not None and team.agent_devices != "auto":
            self.agent_devices = resolve_devices(team.agent_devices, self.num_agents, "agent_devices", [])
        self.generation_settings = sampling
        self.generator: Generator = generator if generator is not None else HFGenerator()
        self.generator.check_settings(self.generation_settings)
        self.optimizer_class, self.lr_scheduler_class = optimizer, lr_scheduler
        self.seed = seed
        # MeanMetric keeps sums, so the value is exact across processes and uneven batches
        self.eval_metrics = torch.nn.ModuleDict(
            {"eval/turn_1/reward_mean": MeanMetric(), "eval/turn_1/expected_return": MeanMetric()}
        )
        self.unparsed_rate = MeanMetric()  # a centralized team's evaluation completions that did not split
        self.evaluator = Evaluator()  # samples, scores and records evaluations; the module says when
        self._team: Optional[Team] = None
        self._agent_tokenizers: Optional[List[Any]] = None
        self.skipped_steps = 0  # identical on every process: they all skip together
        self.save_hyperparameters(ignore=NOT_HYPERPARAMETERS)

    def _roles(self, team: TeamOptions) -> int:
        """The roles the team covers (checked against ``team.agents``): every agent's, or a centralized
        team's ``num_agents``."""
        given = len(team.agents or [])
        if self.collaboration.centralized:
            require(given <= 1, f"agents: a centralized team has one model that writes every role (got {given}).")
            return team.num_agents or 2
        require(
            not (team.agents and team.num_agents is not None and team.num_agents != given),
            f"num_agents ({team.num_agents}) must match the number of agents ({given}).",
        )
        return len(self.agent_sources)

    def _learning_rates(self, agent_learning_rate: Union[float, List[float]]) -> List[float]:
        """One learning rate per agent (one value is every agent's), each > 0."""
        if isinstance(agent_learning_rate, (list, tuple)):
            rates = list(agent_learning_rate)
        else:
            rates = [agent_learning_rate] * self.num_agents
        require(
            len(rates) == self.num_agents,
            f"agent_learning_rate must be one value or one per agent ({self.num_agents}).",
        )
        for rate in rates:
            positive("agent_learning_rate", rate)
        return [float(rate) for rate in rates]

    # ------------------------------------------------------------------------------------------
    # The team (built lazily, so options are validated before any model is loaded)

    @property
    def team(self) -> Team:
        if self._team is None:
            try:
                self._team = self.team_options.build(self.agent_sources, self.agent_tokenizers)
            except AttributeError as error:  # else nn.Module reports "no attribute 'team'" instead
                raise RuntimeError(f"building the team failed: {type(error).__name__}: {error}") from error
        return self._team

    @property
    def num_agents(self) -> int:
        """Agents of the team (one for a centralized team; :attr:`num_roles` counts the roles)."""
        return len(self.agent_sources)

    @property
    def agent_tokenizers(self) -> List[Any]:
        """Each agent's tokenizer, loaded without the models (the team uses these same objects)."""
        if self._team is not None:
            return self._team.tokenizers
        if self._agent_tokenizers is None:
            self._agent_tokenizers = self.team_options.load_tokenizers(self.agent_sources)
        return self._agent_tokenizers

    def team_task(self, task: Task) -> Task:
        """The task as this team sees it: prompts rendered with each agent's chat template where one
        applies (the tokenizers load on first need, the models not at all), and for a centralized
        team one joint prompt per item."""
        return self.collaboration.team_task(task, lambda: self.agent_tokenizers)

    def configure_model(self) -> None:
        # from_pretrained returns models in eval mode; training runs in train mode like the reference.
        self.team.train(self.training)
        self.configure_parts()
        if attached_trainer(self) is not None and is_sharded(self.trainer.strategy) and not self.team.synced:
            if self.device_mesh is None:
                raise RuntimeError("configure_model: a sharded strategy set no device mesh on the module.")
            self.shard(self.device_mesh["data_parallel"])

    def configure_parts(self) -> None:
        """Build what the module keeps beside the team (critics, reference copies, a reward model);
        runs once, after the team is loaded and before it is sharded."""

    def shard(self, mesh) -> None:
        """FSDP2 over ``mesh``: the team's agents (see :meth:`Team.shard`)."""
        self.team.shard(mesh, str(self.trainer.precision))

    def setup(self, stage: str) -> None:
        check_strategy(self.trainer.strategy)
        check_log_files(self.trainer)  # links planted where loggers rewrite files in place are refused
        renew_inference_states(self)  # an earlier validation in inference mode must not break this run

    def configure_callbacks(self) -> List[Callback]:
        """The data module's own callbacks (its state's checkpointing): Lightning adds them before a restore."""
        trainer = attached_trainer(self)
        datamodule = trainer.datamodule if trainer is not None else None  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
        offered = getattr(datamodule, "trainer_callbacks", None)
        return list(offered()) if callable(offered) else []

    def on_fit_start(self) -> None:
        warning = low_precision_weights_warning({p.dtype for p in self.team.parameters() if p.requires_grad})
        if warning is not None:
            rank_zero_warn(warning)
        if self.agent_devices is not None:
            require(
                self.trainer.world_size == 1,
                "agent_devices places the agents of one process; with several processes (DDP) leave it null.",
            )
            for agent, device in zip(self.team.agents, self.agent_devices):
                agent.to(device)

    def parameter_groups(self) -> List[Dict[str, Any]]:
        """The optimizer's parameter groups: one per agent (modules with more parts add theirs)."""
        return [
            {"params": agent_parameters(agent), "lr": lr, "name": f"agent_{i}"}
            for i, (agent, lr) in enumerate(zip(self.team.agents, self.learning_rates))
        ]

    def configure_optimizers(self):
        """One parameter group per agent (its ``lr``), in ``optimizer`` (default fused AdamW).

        One optimizer over per-agent groups equals one optimizer per agent, and keeps Lightning's
        automatic optimization (gradient clipping, accumulation, precision, sharding).
        """
        groups = self.parameter_groups()
        optimizer = adamw(groups) if self.optimizer_class is None else self.optimizer_class(groups)
        if self.lr_scheduler_class is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.lr_scheduler_class(optimizer)}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip each agent's gradients on its own (``trainer.gradient_clip_val``).

        One global norm over all agents would couple their updates, which separate per-agent
        optimizers (the reference) never do.
        """
        if not gradient_clip_val:
            return
        for group in optimizer.param_groups:
            if gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(group["params"], gradient_clip_val)
            else:
                torch.nn.utils.clip_grad_norm_(group["params"], gradient_clip_val)

    def skip_nonfinite(self, loss: torch.Tensor) -> bool:
        """True (with a warning and ``train/skipped_nonfinite_steps``) when the step must be skipped.

        Every process must agree, or the others would wait forever in the gradient all-reduce.
        A NaN/Inf loss is never replaced by a constant (the reference silently used 0.1).
        """
        if self.trainer.strategy.reduce_boolean_decision(bool(torch.isfinite(loss)), all=True):
            return False
        self.skipped_steps += 1
        self.log("train/skipped_nonfinite_steps", float(self.skipped_steps), on_step=True, on_epoch=False)
        rank_zero_warn(f"non-finite loss ({loss.item()}) at step {self.global_step}; update skipped.")
        return True

    trains_on: TrainsOn = "pairs"
    """What the data module serves for training: preference pairs, or task items (rollout modules)."""

    def collate_pairs(self, pairs: List[Any]) -> Any:
        """Training batch of preference pairs (modules that train on pairs override it)."""
        raise TypeError(f"{type(self).__name__} trains on task items, not on preference pairs.")

    @contextlib.contextmanager
    def generation_context(self) -> Iterator[None]:
        """Sampling outside the training step: eval mode, no grad, the precision plugin's autocast."""
        trainer = attached_trainer(self)
        precision = trainer.precision_plugin.forward_context() if trainer is not None else contextlib.nullcontext()
        with torch.no_grad(), precision:
            yield

    def collection_oracle(self, task):
        """What scores joint responses during collection: the task's oracle (MARLHF may use its reward model)."""
        return task.oracle

    # ------------------------------------------------------------------------------------------
    # Evaluation: the current policy's task reward (one sample per agent per eval item), by the evaluator

    @property
    def headline_metric(self) -> str:
        """The name of the metric this module's evaluations report first (:func:`headline_key` of the
        task of the data module it runs with)."""
        trainer = attached_trainer(self)
        datamodule = optional_data_side(trainer) if trainer is not None else None
        return headline_key(getattr(datamodule, "task", None))  # a data module's task is None before setup

    @property
    def evaluated_samples(self) -> Optional[EvaluationSamples]:
        """This process's samples of the evaluation that ended last (``None`` before the first), for
        observers that read them after it (:attr:`Evaluator.evaluated_samples`)."""
        return self.evaluator.evaluated_samples

    def evaluation_sampling(self) -> TeamSampling:
        """What evaluations sample with now: the generator, the team, the sampling settings and context."""
        return TeamSampling(self.generator, self.team, self.generation_settings, self.generation_context)

    def evaluate_items(self, items: Sequence[Dict[str, Any]], task: Any, stream: RandomStream) -> List[float]:
        """Processed task reward of one joint sample per item, drawn from ``stream`` (a multi-turn
        task: the return of one joint trajectory per item), recorded in the evaluation under way."""
        return self.evaluator.evaluate_items(self.evaluation_sampling(), items, task, stream)

    def validation_step(self, batch: List[Optional[Dict[str, Any]]], batch_idx: int) -> None:
        if self.trainer.sanity_checking:  # the module evaluates before the first update itself (on_train_start)
            return
        task = data_side(self.trainer).task
        unparsed_before = task.unparsed_completions
        items = [item for item in batch if item is not None]  # None pads a sharded run's shorter shares
        stream = self.evaluation_batch_stream(batch_idx)
        if task.turns.multi:
            per_turn, returns = self.evaluator.sample_turns(self.evaluation_sampling(), items, task, stream)
            return self._log_turns(items, task, per_turn, returns)
        rewards = self.evaluate_items(items, task, stream)
        if not items:
            return
        values = torch.tensor(rewards, dtype=torch.float32, device=self.device)
        for key, metric in self.eval_metrics.items():
            mean = cast(MeanMetric, metric)  # every evaluation metric is a MeanMetric (__init__)
            mean.update(values)
            self.log(key, mean, on_step=False, on_epoch=True, batch_size=len(items))
        if task.centralized:
            rate = (task.unparsed_completions - unparsed_before) / len(items)
            self.unparsed_rate.update(torch.tensor(rate, device=self.device), weight=len(items))
            self.log("eval/unparsed_rate", self.unparsed_rate, on_step=False, on_epoch=True, batch_size=len(items))

    def _log_turns(
        self, batch: List[Dict[str, Any]], task: Any, per_turn: List[List[float]], returns: List[float]
    ) -> None:
        """A validation step of a multi-turn task: turn 1's reward and the return in the module's exact
        metrics, later turns' rewards averaged over the trajectories that reached them."""
        if not batch:
            return
        values = {TURN_1_KEY: [rewards[0] for rewards in per_turn], RETURN_KEY: returns}
        for key, metric in self.eval_metrics.items():
            cast(MeanMetric, metric).update(torch.tensor(values[key], dtype=torch.float32, device=self.device))
            self.log(key, metric, on_step=False, on_epoch=True, batch_size=len(batch))
        # the return under its own name too: the same exact metric as the reference's name
        self.log(RETURN_MEAN_KEY, self.eval_metrics[RETURN_KEY], on_step=False, on_epoch=True, batch_size=len(batch))
        for turn in range(1, task.turns.num_turns):
            reached = [rewards[turn] for rewards in per_turn if len(rewards) > turn]
            if reached:
                value = torch.tensor(sum(reached) / len(reached), device=self.device)
                key = f"eval/turn_{turn + 1}/reward_mean"
                self.log(key, value, on_step=False, on_epoch=True, batch_size=len(reached), sync_dist=True)

    def predict_step(self, batch: List[Optional[Dict[str, Any]]], batch_idx: int) -> EvaluationSamples:
        """``predict``: the samples an evaluation draws for ``batch`` (the same seeds), with their rewards."""
        task = data_side(self.trainer).task
        items = [item for item in batch if item is not None]  # None pads a sharded run's shorter shares
        return self.evaluator.predict(self.evaluation_sampling(), items, task, self.evaluation_batch_stream(batch_idx))

    def on_validation_epoch_start(self) -> None:
        self.evaluator.start()

    def on_validation_epoch_end(self) -> None:
        for key, value in self.evaluator.finish(self.trainer, self, self.trainer.world_size).items():
            self.log(key, value, on_step=False, on_epoch=True)

    def evaluate_now(self, label: str) -> Optional[float]:
        """Evaluate outside the validation loop (before the first and after the last update)."""
        datamodule = optional_data_side(self.trainer)
        every_item = datamodule.evaluation_items() if datamodule is not None else []
        if datamodule is None or not every_item or self.trainer.limit_val_batches == 0:
            return None
        rank, world = rank_and_world(self.trainer)
        items, task = shard(every_item, rank, world), datamodule.task
        rewards, unparsed_before = [], task.unparsed_completions
        self.evaluator.start()
        # sharded agents: every rank runs as many batches (an empty one samples in step with the others)
        length = -(-len(every_item) // world) if self.team.synced else len(items)
        with Progress.for_trainer(self.trainer, f"evaluation ({label})", len(items), "item") as progress:
            for index, start in enumerate(range(0, length, datamodule.eval_batch_size)):
                batch = items[start : start + datamodule.eval_batch_size]
                rewards += self.evaluate_items(batch, task, self.evaluation_batch_stream(index))
                progress.advance(len(batch))
        totals = gather_objects((sum(rewards), len(rewards), task.unparsed_completions - unparsed_before), world)
        count = max(sum(t[1] for t in totals), 1)
        value = sum(t[0] for t in totals) / count
        metrics = {TURN_1_KEY: value, RETURN_KEY: value, **self.evaluator.turn_summary(world, value)}
        if task.centralized:
            metrics["eval/unparsed_rate"] = sum(t[2] for t in totals) / count
        metrics.update(self.evaluator.finish(self.trainer, self, world))
        # Lightning logs a step's metrics at the index of its last update (updates - 1)
        step = max(self.global_step - 1, 0)
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)
        self._report_evaluation(label, value)
        return value

    def _report_evaluation(self, label: str, value: float) -> None:
        rank_zero_info(f"evaluation ({label}, {self.global_step} updates): {self.headline_metric} = {value:.4f}")

    initial_eval_reward: Optional[float] = None
    final_eval_reward: Optional[float] = None

    def on_train_start(self) -> None:
        if self.trainer.ckpt_path is not None:  # the restored optimizer takes this run's learning rates
            use_learning_rates(self)
        # a run resumed from a checkpoint taken before the first update evaluated before it already
        if self.global_step == 0 and self.trainer.ckpt_path is None:
            self.initial_eval_reward = self.evaluate_now("before training")

    # (update count, reward) of the last validation run: when it saw the final weights, it is the
    # evaluation after training (a second one would log another sample's value at the same step)
    _validated: Optional[tuple] = None

    def on_validation_end(self) -> None:
        value = self.trainer.callback_metrics.get(self.headline_metric)  # the value the headline names
        if not self.trainer.sanity_checking and value is not None:
            self._validated = (self.global_step, float(value))

    def on_train_end(self) -> None:
        if self._validated is not None and self._validated[0] == self.global_step:
            self.final_eval_reward = self._validated[1]
            self._report_evaluation("after training", self.final_eval_reward)
        else:
            self.final_eval_reward = self.evaluate_now("after training")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # after the batch's optimizer step: a generator with its own copy of the weights refreshes it
        self.generator.weights_updated()
        self.trained_updates = self.global_step

    def teardown(self, stage: str) -> None:
        # one process releases what its generator holds (a vLLM engine and its memory); under DDP vLLM's
        # teardown would take the trainer's process group with it, so its engines live until the exit
        trainer = attached_trainer(self)
        if trainer is None or trainer.world_size == 1:
            self.generator.close()

    resume_checked: bool = False
    """Whether the options of the checkpoint being resumed were compared with this run's already (the
    command line and the seed API do it before training; a plain ``Trainer.fit`` when it loads)."""

    def use_sampling(self, settings: GenerationSettings) -> None:
        """Sample with ``settings`` from now on (checked by the generator), and record them as the
        ``sampling`` hyperparameter (``hparams.yaml``, checkpoints)."""
        self.generator.check_settings(settings)
        self.generation_settings = settings
        set_hyperparameter(self, "sampling", settings)

    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        checkpoint["generation_settings"] = builtin_values(dataclasses.asdict(self.generation_settings))
        checkpoint[TEAM_KEY] = module_layout(self)

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        # before the callbacks read their state: Lightning's ModelCheckpoint would delete the files
        # its saved paths name, so a path outside its folder is dropped (with a warning naming it)
        if attached_trainer(self) is not None:
            confine_checkpoint_callbacks(checkpoint, self.trainer.checkpoint_callbacks)
            if not self.resume_checked:  # the resume rule: this run's options, the changes listed
                datamodule = self.trainer.datamodule  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
                apply_resume_rule(checkpoint, self, datamodule, self.trainer.ckpt_path)
        self.trained_updates = int(checkpoint.get("global_step") or 0)
        self.generator.weights_updated()

    def log_metrics_now(self, metrics: Dict[str, float]) -> None:
        """Send metrics straight to the loggers (for work outside a step, such as collection)."""
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)
