"""TeamModule: what every team-training LightningModule shares (team, sampling, evaluation)."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torchmetrics import MeanMetric

from ..checkpointing import enable_activation_checkpointing
from ..data import DATA_STATE_MARKER
from ..defaults import EMBEDDED
from ..devices import DeviceSpec, resolve_devices
from ..distributed import gather_objects, rank_and_world, shard
from ..optim import adamw
from ..options import at_least, positive, require
from ..rng import RandomStream
from ..lora import agent_parameters, build_lora_agents
from ..team import GenerationSettings, Team, load_tokenizer


class TeamModule(LightningModule):
    """A team of N causal-LM agents with sampling settings and task-reward evaluation.

    Args:
        agent_model: model for every agent: a hub id, a local path, or ``"embedded"`` (tiny local model).
        agents: one model per agent (hub ids / paths, or model objects from Python); overrides
            ``agent_model`` and sets the team size.
        num_agents: team size (default: ``len(agents)``, else 2); must match ``agents`` when both are given.
        tokenizers: tokenizer object(s) for model objects (Python API only).
        dtype: torch dtype name for loaded models (``bfloat16``, ``float32``...); default: as saved.
        agent_devices: one device per agent inside one process (``None``/``auto``: the strategy's
            device; a device for all; a list of 1 or N). Single-process runs only: with DDP every
            process drives one device.
        agent_learning_rate: AdamW learning rate, one for all agents or one per agent.
        weight_decay: AdamW weight decay (torch's default, as the reference).
        max_new_tokens: tokens sampled per completion (collection and evaluation).
        temperature: sampling temperature (> 0).
        top_p: nucleus sampling mass in (0, 1].
        top_k: top-k sampling (``None``: off).
        generation_batch_size: sequences per ``generate()`` call; items share calls (``None``: as
            many as a quarter of the device's total memory holds, estimated from the model's config).
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
        num_turns: must be 1.
        collaboration_mode: ``decentralized`` (one model per agent).
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
        max_new_tokens: int = 256,
        temperature: float = 0.6,
        top_p: float = 0.6,
        top_k: Optional[int] = 50,
        generation_batch_size: Optional[int] = None,
        lora_r: Optional[int] = None,
        lora_alpha: int = 16,
        lora_dropout: float = 0.0,
        lora_target_modules: Optional[List[str]] = None,
        gradient_checkpointing: bool = False,
        checkpoint_every_n_layers: int = 1,
        num_turns: int = 1,
        collaboration_mode: str = "decentralized",
        seed: int = 0,
    ) -> None:
        super().__init__()
        require(
            collaboration_mode == "decentralized",
            "collaboration_mode must be decentralized (centralized collaboration is not available in comlrl-lightning).",
        )
        if num_agents is not None:
            at_least("num_agents", num_agents, 1, allow_none=True)
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
        at_least("generation_batch_size", generation_batch_size, 1, allow_none=True)
        at_least("checkpoint_every_n_layers", checkpoint_every_n_layers, 1)
        self.agent_sources = list(agents) if agents else [agent_model] * (num_agents or 2)
        rates = agent_learning_rate if isinstance(agent_learning_rate, (list, tuple)) else [agent_learning_rate] * len(self.agent_sources)
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
        self.lora_options = None if lora_r is None else dict(
            r=lora_r, alpha=lora_alpha, dropout=lora_dropout, target_modules=lora_target_modules
        )
        self.tokenizer_objects = tokenizers
        self.dtype_name = dtype
        self.generation_settings = GenerationSettings(max_new_tokens, temperature, top_p, top_k, generation_batch_size)
        # MeanMetric keeps sums, so the value is exact across processes and uneven batches
        self.eval_metrics = torch.nn.ModuleDict(
            {"eval/turn_1/reward_mean": MeanMetric(), "eval/turn_1/expected_return": MeanMetric()}
        )
        self._team: Optional[Team] = None
        self.skipped_steps = 0  # identical on every process: they all skip together
        self.save_hyperparameters(ignore=["agents", "tokenizers"])
        if all(isinstance(source, str) for source in self.agent_sources):
            self.hparams["agents"] = self.agent_sources

    # ------------------------------------------------------------------------------------------
    # The team (built lazily, so options are validated before any model is loaded)

    @property
    def team(self) -> Team:
        if self._team is None:
            if self.lora_options is None:
                self._team = Team(self.agent_sources, self.tokenizer_objects, self.dtype_name)
            else:
                source = self.agent_sources[0]
                agents = build_lora_agents(source, self.num_agents, dtype=self.dtype_name, **self.lora_options)
                tokenizers = self.tokenizer_objects if self.tokenizer_objects is not None else load_tokenizer(source)
                self._team = Team(agents, tokenizers)
            if self.hparams.gradient_checkpointing:
                for agent in self._team.agents:
                    enable_activation_checkpointing(agent, self.hparams.checkpoint_every_n_layers)
        return self._team

    @property
    def num_agents(self) -> int:
        return len(self.agent_sources)

    def configure_model(self) -> None:
        # from_pretrained returns models in eval mode; training runs in train mode like the reference.
        self.team.train(self.training)

    def on_fit_start(self) -> None:
        if self.agent_devices is not None:
            require(
                self.trainer.world_size == 1,
                "agent_devices places the agents of one process; with several processes (DDP) leave it null.",
            )
            for agent, device in zip(self.team.agents, self.agent_devices):
                agent.to(device)

    def configure_optimizers(self):
        groups = [
            {"params": agent_parameters(agent), "lr": lr, "name": f"agent_{i}"}
            for i, (agent, lr) in enumerate(zip(self.team.agents, self.learning_rates))
        ]
        return adamw(groups, weight_decay=self.hparams.weight_decay)

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
            samples = [
                self.team.generate(agent, [p[agent] for p in prompts], 1, self.generation_settings, stream)
                for agent in range(self.team.num_agents)
            ]
        rewards = []
        for k, item in enumerate(items):
            _, processed = task.oracle.score([[samples[a][k][0].text] for a in range(len(samples))], prompts[k], item)
            rewards.append(processed[0])
        return rewards

    def _eval_stream(self, *keys: object) -> RandomStream:
        # derived from the progress, so evaluation never shifts any other sampling, and resumes exactly
        return RandomStream.derive(self.hparams.seed, "eval", self.global_step, self.global_rank, *keys)

    def validation_step(self, batch: List[Dict[str, Any]], batch_idx: int) -> None:
        rewards = self.evaluate_items(batch, self.trainer.datamodule.task, self._eval_stream(batch_idx))
        values = torch.tensor(rewards, dtype=torch.float32, device=self.device)
        for key, metric in self.eval_metrics.items():
            metric.update(values)
            self.log(key, metric, on_step=False, on_epoch=True, batch_size=len(batch))

    def evaluate_now(self, label: str) -> Optional[float]:
        """Evaluate outside the validation loop (before the first and after the last update)."""
        datamodule = self.trainer.datamodule
        rank, world = rank_and_world(self.trainer)
        items = shard(datamodule.eval_items[: datamodule.eval_num_samples], rank, world)
        if not datamodule.eval_items[: datamodule.eval_num_samples] or self.trainer.limit_val_batches == 0:
            return None
        rewards = []
        for index, start in enumerate(range(0, len(items), datamodule.eval_batch_size)):
            batch = items[start : start + datamodule.eval_batch_size]
            rewards += self.evaluate_items(batch, datamodule.task, self._eval_stream(label, index))
        totals = gather_objects((sum(rewards), len(rewards)), world)
        value = sum(t[0] for t in totals) / max(sum(t[1] for t in totals), 1)
        # Lightning logs a step's metrics at the index of its last update (updates - 1)
        step = max(self.global_step - 1, 0)
        for logger in self.loggers:
            logger.log_metrics({"eval/turn_1/reward_mean": value, "eval/turn_1/expected_return": value}, step=step)
        rank_zero_info(f"evaluation ({label}, {self.global_step} updates): eval/turn_1/reward_mean = {value:.4f}")
        return value

    initial_eval_reward: Optional[float] = None
    final_eval_reward: Optional[float] = None

    def on_train_start(self) -> None:
        if self.global_step == 0:
            self.initial_eval_reward = self.evaluate_now("before training")

    def on_train_end(self) -> None:
        self.final_eval_reward = self.evaluate_now("after training")

    def log_metrics_now(self, metrics: Dict[str, float]) -> None:
        """Send metrics straight to the loggers (for work outside a step, such as collection)."""
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        self._find_data_state(checkpoint)

    def _find_data_state(self, checkpoint: Dict[str, Any]) -> None:
        """Let a renamed or subclassed data module resume.

        Lightning stores the data module's state under its class name and silently skips it when
        the name differs, which would quietly recollect pairs and restart the replay history. This
        hook runs just before the data module is restored and files our state under the new name.
        """
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        key = type(datamodule).__qualname__
        if datamodule is None or key in checkpoint:
            return
        found = [k for k, v in checkpoint.items() if isinstance(v, dict) and DATA_STATE_MARKER in v]
        if len(found) > 1:
            raise RuntimeError(f"The checkpoint holds data states {found}; none matches the data module {key}.")
        if found:
            rank_zero_info(f"Restoring the data module {key} from the checkpoint's {found[0]} state.")
            checkpoint[key] = checkpoint[found[0]]
