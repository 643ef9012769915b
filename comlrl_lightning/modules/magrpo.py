"""MAGRPOModule: group policy gradient for a team (MAGRPO, MAREINFORCE, MAReMax, MARLOO)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Literal, Optional

import torch

from ..contract import data_side
from ..devices import DeviceSpec, resolve_devices
from ..lora import is_lora_team
from ..losses import group_advantages, k3_kl, policy_gradient_loss
from ..options import OptionError, at_least, choice, require
from ..rng import RandomStream
from ..team import Team, pack_sequences
from .base import NOT_HYPERPARAMETERS, TeamModule

RL_ALGORITHMS = ("magrpo", "mareinforce", "maremax", "marloo", "maac", "iac")
BASELINES = {"magrpo": "mean", "mareinforce": "raw", "maremax": "max", "marloo": "rloo"}


class MAGRPOModule(TeamModule):
    """Policy gradient with group baselines: every agent samples ``num_generations`` completions per item.

    Joint response ``g`` (sample ``g`` of every agent) gets the return ``R_g`` (the task reward here;
    a learned reward model in :class:`MARLHFModule`), optionally reduced by
    ``reference_kl_coef x KL_i`` (k3 estimate against the frozen initial policy, per agent). Each agent's
    advantages come from its group of ``G`` returns (``magrpo``: minus the mean, ``mareinforce``: raw,
    ``maremax``: minus the max, ``marloo``: leave-one-out) and, with ``advantage_normalization``, are
    divided by the group's std without re-centering, so the four stay different algorithms. The loss is
    ``sum_i mean -A * log pi_i(completion)``; tokens after the EOS are not scored.

    Args:
        rl_algorithm: ``magrpo``, ``mareinforce``, ``maremax`` or ``marloo`` (the actor-critic ``maac``
            and ``iac`` are not available yet).
        num_generations: G samples per agent per item (>= 2).
        advantage_normalization: divide advantages by the group std.
        reference_kl_enabled: penalise the k3 KL to the initial policy.
        reference_kl_coef: KL coefficient (>= 0).
        reference_devices: devices of the frozen reference copies (default: the agents').
        **kwargs: team, optimizer and sampling options of :class:`TeamModule`.
    """

    trains_on = "items"

    def __init__(
        self,
        rl_algorithm: Literal["magrpo", "mareinforce", "maremax", "marloo", "maac", "iac"] = "magrpo",
        num_generations: int = 4,
        advantage_normalization: bool = True,
        reference_kl_enabled: bool = False,
        reference_kl_coef: float = 0.1,
        reference_devices: DeviceSpec = None,
        **kwargs: Any,
    ) -> None:
        algorithm = choice("rl_algorithm", rl_algorithm or "magrpo", RL_ALGORITHMS)
        if algorithm in ("maac", "iac"):
            raise OptionError(f"rl_algorithm='{algorithm}' (actor-critic) is not available yet in comlrl-lightning.")
        require(num_generations >= 2, "num_generations must be >= 2 for MAGRPO-family MARLHF backends.")
        at_least("reference_kl_coef", reference_kl_coef, 0)
        super().__init__(**kwargs)
        if isinstance(reference_devices, list):
            resolve_devices(reference_devices, self.num_agents, "reference_devices", [])
        self.rl_algorithm, self.baseline = algorithm, BASELINES[algorithm]
        self.num_generations = num_generations
        self.advantage_normalization = advantage_normalization
        self.reference_kl_enabled, self.reference_kl_coef = reference_kl_enabled, float(reference_kl_coef)
        self.reference_devices = reference_devices
        self.reference: Optional[Team] = None
        self.save_hyperparameters(ignore=NOT_HYPERPARAMETERS)

    def configure_model(self) -> None:
        super().configure_model()
        if self.reference_kl_enabled and self.reference is None and not is_lora_team(self.team.agents):
            # a frozen copy of the initial policy (configure_model runs before a checkpoint is restored)
            devices = resolve_devices(
                self.reference_devices, self.num_agents, "reference_devices",
                [str(self.team.device_of(i)) for i in range(self.num_agents)],
            )
            agents = [copy.deepcopy(agent).to(device) for agent, device in zip(self.team.agents, devices)]
            self.reference = Team(agents, tokenizers=list(self.team.tokenizers)).requires_grad_(False).eval()

    def reference_model(self, agent: int):
        """The frozen initial policy of ``agent``: a copy, or for a LoRA team the base with adapters disabled."""
        if self.reference is not None:
            return self.reference.agents[agent]
        return self.team.agents[agent].base_model_view()

    # ------------------------------------------------------------------------------------------
    # Rollouts

    def joint_returns(self, items: List[Dict[str, Any]], prompts: List[List[str]], texts: List[List[List[str]]]) -> torch.Tensor:
        """``[items, G]`` returns of the joint responses; ``texts[agent][item][g]``. Here: the task reward."""
        oracle = data_side(self.trainer).task.oracle
        rows = [oracle.score([per_agent[k] for per_agent in texts], prompts[k], item)[1] for k, item in enumerate(items)]
        return torch.tensor(rows, dtype=torch.float32, device=self.device)

    def training_step(self, items: List[Dict[str, Any]], batch_idx: int) -> Optional[torch.Tensor]:
        task = data_side(self.trainer).task
        prompts = [task.prompts(item) for item in items]
        size, group = len(items), self.num_generations
        stream = RandomStream.derive(self.hparams.seed, "rollout", self.global_step, self.global_rank)
        with self.generation_context():
            samples = [
                self.generator.generate(self.team, a, [p[a] for p in prompts], group, self.generation_settings, stream)
                for a in range(self.num_agents)
            ]
        returns = self.joint_returns(items, prompts, [[[c.text for c in row] for row in agent] for agent in samples])
        loss = torch.zeros((), device=self.device)
        kl_means = []
        for agent in range(self.num_agents):
            prompt_ids = [ids for ids in self.team.encode_prompts(agent, [p[agent] for p in prompts]) for _ in range(group)]
            completions = [c.ids for row in samples[agent] for c in row]
            batch = pack_sequences(prompt_ids, completions, [len(c) for c in completions], self.team.tokenizers[agent].pad_token_id)
            batch = {k: v.to(self.device) for k, v in batch.items()}
            width, score_mask = batch["score_mask"].shape[1], batch["score_mask"]
            token_logprobs = self.team.token_logprobs(agent, batch["input_ids"], batch["attention_mask"], width, score_mask=score_mask)
            agent_returns = returns
            if self.reference_kl_enabled:
                with torch.no_grad():
                    reference = self.team.token_logprobs(
                        agent, batch["input_ids"], batch["attention_mask"], width, model=self.reference_model(agent),
                        score_mask=score_mask,
                    )
                kl = k3_kl(token_logprobs.detach(), reference, batch["score_mask"]).view(size, group)
                agent_returns = returns - self.reference_kl_coef * kl
                kl_means.append(kl.mean())
            advantages = group_advantages(agent_returns, self.baseline, self.advantage_normalization)
            sequence_logprobs = (token_logprobs * batch["score_mask"]).sum(dim=-1)
            loss = loss + policy_gradient_loss(sequence_logprobs, advantages.reshape(-1))
        if self.skip_nonfinite(loss):
            return None
        metrics = {"train/loss": loss.detach(), "turn_1/reward_mean": returns.mean(), "turn_1/expected_return": returns.mean()}
        if kl_means:
            kl_mean = torch.stack(kl_means).mean()
            metrics.update({"turn_1/reference_kl_mean": kl_mean, "turn_1/reference_kl_penalty_mean": self.reference_kl_coef * kl_mean})
        self.log_dict(metrics, batch_size=size)
        return loss
