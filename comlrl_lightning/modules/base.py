"""TeamModule: what every team-training LightningModule shares (team, sampling, evaluation)."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Literal, Optional, Sequence, Union

import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torchmetrics import MeanMetric

from comlrl_lightning.data.contract import data_side, optional_data_side
from comlrl_lightning.data.task import Task
from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.generation.base import GenerationSettings, Generator, sample_team
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.modules.collaboration import Collaboration, Decentralized
from comlrl_lightning.modules.optim import adamw
from comlrl_lightning.options import at_least, positive, require
from comlrl_lightning.runtime.checkpoint_io import install as install_atomic_checkpoints
from comlrl_lightning.runtime.devices import DeviceSpec, resolve_devices
from comlrl_lightning.runtime.distributed import gather_objects, rank_and_world, shard
from comlrl_lightning.runtime.files import check_log_files
from comlrl_lightning.runtime.paths import confine_checkpoint_callbacks
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.runtime.sharding import check_strategy, is_sharded, shard_model
from comlrl_lightning.team.activation_checkpointing import (
    enable_activation_checkpointing,
)
from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.team.lora import agent_parameters, build_lora_agents, is_lora_team
from comlrl_lightning.team.team import Team

NOT_HYPERPARAMETERS = ["agents", "tokenizers", "optimizer", "lr_scheduler", "generator", "critic", "collaboration"]
"""Objects, not values: left out of ``hparams`` (LightningCLI saves the whole config anyway)."""


class TeamModule(LightningModule):
    """A team of N causal-LM agents with sampling settings and task-reward evaluation.

    Args:
        agent_model: model for every agent: a hub id, a local path, or ``"embedded"`` (tiny local model).
        agents: one model per agent (hub ids / paths, or model objects from Python); overrides
            ``agent_model`` and sets the team size (a centralized team: one model).
        num_agents: number of roles (default: ``len(agents)``, else 2): the team size, or with a
            centralized ``collaboration`` the roles its one model writes; must match a
            decentralized ``agents`` list when both are given.
        tokenizers: tokenizer object(s), one for all agents or one per agent (Python API only):
            required for model objects; for model sources they replace the saved tokenizers (e.g.
            to give an agent another chat template). Prompts are rendered with each agent's own.
        dtype: torch dtype name for loaded models (``bfloat16``, ``float32``...); default: as saved.
        agent_devices: one device per agent inside one process (``None``/``auto``: the strategy's
            device; a device for all; a list of 1 or N). Single-process runs only: with DDP every
            process drives one device.
        agent_learning_rate: learning rate, one for all agents or one per agent (each agent is one
            parameter group of the optimizer).
        weight_decay: weight decay of every agent's group (AdamW's default, as the reference).
        optimizer: the optimizer class over the agents' parameter groups (``None``: AdamW, fused
            where torch has the kernel); e.g. ``torch.optim.SGD`` with its own ``init_args``. The
            groups' ``lr`` and ``weight_decay`` come from the two options above.
        lr_scheduler: an optional learning-rate scheduler class over that optimizer, stepped every
            epoch (e.g. ``torch.optim.lr_scheduler.LinearLR``).
        max_new_tokens: tokens sampled per completion (collection and evaluation).
        temperature: sampling temperature (> 0).
        top_p: nucleus sampling mass in (0, 1].
        top_k: top-k sampling (``None``: off).
        generator: the generation backend (``None``: :class:`~comlrl_lightning.generation.HFGenerator`,
            Hugging Face ``generate()``); collection, comparators, evaluation and rollouts sample with it.
        lora_r: build the team as ONE base model with one LoRA adapter of this rank per agent
            (``None``: every agent is a full model). All agents must then share one model source.
        lora_alpha: LoRA scaling numerator.
        lora_dropout: dropout on the LoRA path.
        lora_target_modules: module names that get adapters (default: peft's choice for the model type).
        gradient_checkpointing: recompute each agent layer's activations during backward
            (transformers' activation checkpointing, non-reentrant): the activation memory of
            training falls to about one layer's, for about one more forward per step.
        checkpoint_every_n_layers: with ``gradient_checkpointing``, checkpoint only every n-th
            layer; the others keep their activations (memory traded back for speed).
        fused_lm_head: score tokens with the fused, chunked LM head (no ``[positions, vocabulary]``
            logits): ``None`` wherever the model's head is a plain linear layer (else the
            materialised logits), ``True`` always (an error where it cannot), ``False`` never.
        num_turns: must be 1.
        collaboration: how the team covers the roles: :class:`~comlrl_lightning.modules.Decentralized`
            (``None``: one agent per role) or :class:`~comlrl_lightning.modules.Centralized`
            (one model writes every role in one joint completion).
        seed: seed of the evaluation (and rollout) sampling streams, derived per step and rank.
    """

    def __init__(
        self,
        agent_model: str = EMBEDDED,
        agents: Optional[List[str]] = None,
        num_agents: Optional[int] = None,
        tokenizers: Optional[Any] = None,
        dtype: Optional[str] = None,
        agent_devices: DeviceSpec = None,
        agent_learning_rate: Union[float, List[float]] = 5e-6,
        weight_decay: float = 0.01,
        optimizer: Optional[OptimizerCallable] = None,
        lr_scheduler: Optional[LRSchedulerCallable] = None,
        max_new_tokens: PositiveInt = 256,
        temperature: PositiveFloat = 0.6,
        top_p: float = 0.6,
        top_k: Optional[PositiveInt] = 50,
        generator: Optional[Generator] = None,
        lora_r: Optional[int] = None,
        lora_alpha: int = 16,
        lora_dropout: float = 0.0,
        lora_target_modules: Optional[List[str]] = None,
        gradient_checkpointing: bool = False,
        checkpoint_every_n_layers: int = 1,
        fused_lm_head: Optional[bool] = None,
        num_turns: int = 1,
        collaboration: Optional[Collaboration] = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.collaboration = collaboration if collaboration is not None else Decentralized()
        if num_agents is not None:
            at_least("num_agents", num_agents, 1, allow_none=True)
        if self.collaboration.centralized:
            require(
                not agents or len(agents) == 1,
                f"agents: a centralized team has one model that writes every role (got {len(agents or [])}).",
            )
        else:
            require(
                not (agents and num_agents is not None and num_agents != len(agents)),
                f"num_agents ({num_agents}) must match the number of agents ({len(agents or [])}).",
            )
        at_least("num_turns", num_turns, 1)
        require(num_turns == 1, "MADPO currently supports num_turns=1 only.")
        at_least("max_new_tokens", max_new_tokens, 1)
        positive("temperature", temperature)
        require(0 < top_p <= 1, "top_p must be in (0, 1].")
        if top_k is not None:
            at_least("top_k", top_k, 1, allow_none=True)
        at_least("checkpoint_every_n_layers", checkpoint_every_n_layers, 1)
        if self.collaboration.centralized:
            self.agent_sources, self.num_roles = list(agents or [agent_model]), num_agents or 2
        else:
            self.agent_sources = list(agents) if agents else [agent_model] * (num_agents or 2)
            self.num_roles = len(self.agent_sources)
        rates = (
            agent_learning_rate
            if isinstance(agent_learning_rate, (list, tuple))
            else [agent_learning_rate] * len(self.agent_sources)
        )
        require(
            len(rates) == len(self.agent_sources),
            f"agent_learning_rate must be one value or one per agent ({len(self.agent_sources)}).",
        )
        for rate in rates:
            positive("agent_learning_rate", rate)
        self.learning_rates = [float(rate) for rate in rates]
        self.agent_devices = None
        if agent_devices is not None and agent_devices != "auto":
            self.agent_devices = resolve_devices(agent_devices, len(self.agent_sources), "agent_devices", [])
        if lora_r is not None:
            at_least("lora_r", lora_r, 1, allow_none=True)
            require(
                len({str(source) for source in self.agent_sources}) == 1,
                "lora_r: a LoRA team needs one base model for all agents (use agent_model, or identical agents).",
            )
        self.lora_options = (
            None
            if lora_r is None
            else dict(r=lora_r, alpha=lora_alpha, dropout=lora_dropout, target_modules=lora_target_modules)
        )
        self.tokenizer_objects = tokenizers
        self.dtype_name = dtype
        self.generation_settings = GenerationSettings(max_new_tokens, temperature, top_p, top_k)
        self.generator: Generator = generator if generator is not None else HFGenerator()
        self.optimizer_class, self.lr_scheduler_class = optimizer, lr_scheduler
        # MeanMetric keeps sums, so the value is exact across processes and uneven batches
        self.eval_metrics = torch.nn.ModuleDict(
            {"eval/turn_1/reward_mean": MeanMetric(), "eval/turn_1/expected_return": MeanMetric()}
        )
        self.unparsed_rate = MeanMetric()  # a centralized team's evaluation completions that did not split
        self._team: Optional[Team] = None
        self._agent_tokenizers: Optional[List[Any]] = None
        self.skipped_steps = 0  # identical on every process: they all skip together
        self.save_hyperparameters(ignore=NOT_HYPERPARAMETERS)
        if all(isinstance(source, str) for source in self.agent_sources):
            self.hparams["agents"] = self.agent_sources

    # ------------------------------------------------------------------------------------------
    # The team (built lazily, so options are validated before any model is loaded)

    @property
    def team(self) -> Team:
        if self._team is None:
            if self.lora_options is None:
                self._team = Team(self.agent_sources, self.agent_tokenizers, self.dtype_name)
            else:
                source = self.agent_sources[0]
                agents = build_lora_agents(source, self.num_agents, dtype=self.dtype_name, **self.lora_options)
                self._team = Team(agents, self.agent_tokenizers)
            if self.hparams.gradient_checkpointing:
                for agent in self._team.agents:
                    enable_activation_checkpointing(agent, self.hparams.checkpoint_every_n_layers)
            self._team.fused_head = self.hparams.fused_lm_head
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
            if self.lora_options is None:
                self._agent_tokenizers = Team.resolve_tokenizers(self.agent_sources, self.tokenizer_objects)
            else:  # one base model: one tokenizer, shared by every adapter
                shared = (
                    self.tokenizer_objects
                    if self.tokenizer_objects is not None
                    else load_tokenizer(self.agent_sources[0])
                )
                self._agent_tokenizers = Team.resolve_tokenizers(self.agent_sources, shared)
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
        if self._trainer is not None and is_sharded(self.trainer.strategy) and not self.team.synced:
            self.shard(self.device_mesh["data_parallel"])

    def configure_parts(self) -> None:
        """Build what the module keeps beside the team (critics, reference copies, a reward model);
        runs once, after the team is loaded and before it is sharded."""

    def shard(self, mesh) -> None:
        """FSDP2 over ``mesh``: every agent per decoder layer and root. A LoRA team's one shared model is
        sharded at the transformers model under peft, whose forward every call (``generate()`` too) runs."""
        models = [self.team.agents[0].get_base_model()] if is_lora_team(self.team.agents) else list(self.team.agents)
        for model in models:
            shard_model(model, mesh, str(self.trainer.precision))
        self.team.synced = True

    def setup(self, stage: str) -> None:
        check_strategy(self.trainer.strategy)
        # checkpoints are written atomically (a full disk or a crash never leaves a torn one) and
        # never loaded from a URL (unless the user chose a checkpoint IO of their own)
        install_atomic_checkpoints(self.trainer.strategy)
        check_log_files(self.trainer)  # links planted where loggers rewrite files in place are refused

    def on_fit_start(self) -> None:
        if self.agent_devices is not None:
            require(
                self.trainer.world_size == 1,
                "agent_devices places the agents of one process; with several processes (DDP) leave it null.",
            )
            for agent, device in zip(self.team.agents, self.agent_devices):
                agent.to(device)

    def parameter_groups(self) -> List[Dict[str, Any]]:
        """The optimizer's parameter groups: one per agent (modules with more parts add theirs)."""
        decay = self.hparams.weight_decay
        return [
            {"params": agent_parameters(agent), "lr": lr, "weight_decay": decay, "name": f"agent_{i}"}
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

    trains_on: Literal["pairs", "items"] = "pairs"
    """What the data module serves for training: preference pairs, or task items (rollout modules)."""

    def collate_pairs(self, pairs: List[Any]) -> Any:
        """Training batch of preference pairs (modules that train on pairs override it)."""
        raise TypeError(f"{type(self).__name__} trains on task items, not on preference pairs.")

    @contextlib.contextmanager
    def generation_context(self) -> Iterator[None]:
        """Sampling outside the training step: eval mode, no grad, the precision plugin's autocast."""
        trainer = self._trainer
        precision = trainer.precision_plugin.forward_context() if trainer is not None else contextlib.nullcontext()
        with torch.no_grad(), precision:
            yield

    def collection_oracle(self, task):
        """What scores joint responses during collection: the task's oracle (MARLHF may use its reward model)."""
        return task.oracle

    # ------------------------------------------------------------------------------------------
    # Evaluation: the current policy's task reward (one sample per agent per eval item)

    def evaluate_items(self, items: Sequence[Dict[str, Any]], task, stream: RandomStream) -> List[float]:
        """Processed task reward of one joint sample per item, drawn from ``stream``."""
        prompts = [task.prompts(item) for item in items]
        with self.generation_context():
            samples = sample_team(self.generator, self.team, prompts, 1, self.generation_settings, stream)
        rewards = []
        for k, item in enumerate(items):
            _, processed = task.oracle.score([[samples[a][k][0].text] for a in range(len(samples))], prompts[k], item)
            rewards.append(processed[0])
        return rewards

    def _eval_stream(self, *keys: object) -> RandomStream:
        # derived from the progress, so evaluation never shifts any other sampling, and resumes exactly
        return RandomStream.derive(self.hparams.seed, "eval", self.global_step, self.global_rank, *keys)

    def validation_step(self, batch: List[Optional[Dict[str, Any]]], batch_idx: int) -> None:
        task = data_side(self.trainer).task
        unparsed_before = task.unparsed_completions
        batch = [item for item in batch if item is not None]  # None pads a sharded run's shorter shares
        rewards = self.evaluate_items(batch, task, self._eval_stream(batch_idx))
        if not batch:
            return
        values = torch.tensor(rewards, dtype=torch.float32, device=self.device)
        for key, metric in self.eval_metrics.items():
            metric.update(values)
            self.log(key, metric, on_step=False, on_epoch=True, batch_size=len(batch))
        if task.centralized:
            rate = (task.unparsed_completions - unparsed_before) / len(batch)
            self.unparsed_rate.update(torch.tensor(rate, device=self.device), weight=len(batch))
            self.log("eval/unparsed_rate", self.unparsed_rate, on_step=False, on_epoch=True, batch_size=len(batch))

    def evaluate_now(self, label: str) -> Optional[float]:
        """Evaluate outside the validation loop (before the first and after the last update)."""
        datamodule = optional_data_side(self.trainer)
        every_item = datamodule.evaluation_items() if datamodule is not None else []
        if not every_item or self.trainer.limit_val_batches == 0:
            return None
        rank, world = rank_and_world(self.trainer)
        items, task = shard(every_item, rank, world), datamodule.task
        rewards, unparsed_before = [], task.unparsed_completions
        # sharded agents: every rank runs as many batches (an empty one samples in step with the others)
        length = -(-len(every_item) // world) if self.team.synced else len(items)
        for index, start in enumerate(range(0, length, datamodule.eval_batch_size)):
            batch = items[start : start + datamodule.eval_batch_size]
            rewards += self.evaluate_items(batch, task, self._eval_stream(label, index))
        totals = gather_objects((sum(rewards), len(rewards), task.unparsed_completions - unparsed_before), world)
        count = max(sum(t[1] for t in totals), 1)
        value = sum(t[0] for t in totals) / count
        metrics = {"eval/turn_1/reward_mean": value, "eval/turn_1/expected_return": value}
        if task.centralized:
            metrics["eval/unparsed_rate"] = sum(t[2] for t in totals) / count
        # Lightning logs a step's metrics at the index of its last update (updates - 1)
        step = max(self.global_step - 1, 0)
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)
        rank_zero_info(f"evaluation ({label}, {self.global_step} updates): eval/turn_1/reward_mean = {value:.4f}")
        return value

    initial_eval_reward: Optional[float] = None
    final_eval_reward: Optional[float] = None

    def on_train_start(self) -> None:
        if self.global_step == 0:
            self.initial_eval_reward = self.evaluate_now("before training")

    def on_train_end(self) -> None:
        self.final_eval_reward = self.evaluate_now("after training")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # after the batch's optimizer step: a generator with its own copy of the weights refreshes it
        self.generator.weights_updated()

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        # before the callbacks read their state: Lightning's ModelCheckpoint would delete the files
        # its saved paths name, so a path outside its folder is dropped (with a warning naming it)
        if self._trainer is not None:
            confine_checkpoint_callbacks(checkpoint, self.trainer.checkpoint_callbacks)
        self.generator.weights_updated()

    def log_metrics_now(self, metrics: Dict[str, float]) -> None:
        """Send metrics straight to the loggers (for work outside a step, such as collection)."""
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)
