"""MAGRPOModule: multi-agent policy gradient, with group baselines (MAGRPO family) or critics (MAAC, IAC)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union, get_args

import torch

from comlrl_lightning.contracts import data_side
from comlrl_lightning.critics import Critic, IndividualCritics, SharedCritic
from comlrl_lightning.generation.base import Completion
from comlrl_lightning.losses import (
    Baseline,
    actor_critic_advantages,
    explained_variance,
    group_advantages,
    k3_kl,
    policy_gradient_loss,
)
from comlrl_lightning.modules.base import NOT_HYPERPARAMETERS, TeamModule
from comlrl_lightning.modules.evaluation_metrics import RolloutMetrics, RolloutSamples, domain_metrics
from comlrl_lightning.rounds.trajectories import sample_joint, team_sampler
from comlrl_lightning.runtime.devices import DeviceSpec, resolve_devices
from comlrl_lightning.runtime.quiet import expect_eval_mode_parts
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.runtime.sharding import shard_model
from comlrl_lightning.tasks.oracle import score_requests
from comlrl_lightning.team.team import Team, pack_sequences
from comlrl_lightning.validation import OptionError, at_least, choice, require

RLAlgorithm = Literal["magrpo", "mareinforce", "maremax", "marloo", "maac", "iac"]
"""The policy-gradient backends: four group baselines and two actor-critic ones."""
RL_ALGORITHMS = get_args(RLAlgorithm)
GROUP_BASELINES: Dict[str, Baseline] = {"magrpo": "mean", "mareinforce": "raw", "maremax": "max", "marloo": "rloo"}
"""Each group-baseline algorithm and the baseline of its advantages."""
CRITICS = {"maac": SharedCritic, "iac": IndividualCritics}
"""Each actor-critic algorithm and its default critic."""


def check_num_generations(algorithm: str, num_generations: int) -> None:
    """Samples per agent per item: >= 2 for a group baseline (a group of one has no baseline), >= 1 with a critic."""
    if algorithm in CRITICS:
        at_least("num_generations", num_generations, 1)
    else:
        require(num_generations >= 2, "num_generations must be >= 2 for MAGRPO-family MARLHF backends.")


def agent_major(joint: Sequence[Sequence[Sequence[Completion]]], num_agents: int) -> List[List[List[Completion]]]:
    """``[agent][item][g]`` of joint answers ``joint[item][g][agent]``: each agent's rollouts, the
    layout its log-probs and returns are computed in."""
    return [[[answer[agent] for answer in answers] for answers in joint] for agent in range(num_agents)]


@dataclass(frozen=True)
class ReferenceKL:
    """A penalty on each agent's k3 KL to the frozen initial policy (the team module's ``reference_kl``).

    Args:
        coef: KL coefficient (>= 0): each agent's return is reduced by ``coef x KL_i``.
        devices: devices of the frozen reference copies (default: the agents'; a LoRA team scores
            with its base, adapters off, and needs no copy).
    """

    coef: float = 0.1
    devices: DeviceSpec = None

    def __post_init__(self) -> None:
        at_least("reference_kl.coef", self.coef, 0)


class MAGRPOModule(TeamModule):
    """Multi-agent policy gradient: every agent samples ``num_generations`` completions per item.

    Joint response ``g`` (sample ``g`` of every agent) gets the return ``R_g`` (the task reward here;
    a learned reward model in :class:`MARLHFModule`), optionally reduced by
    ``reference_kl.coef x KL_i`` (k3 estimate against the frozen initial policy, per agent) to ``R̃_i``.
    The loss is ``sum_i mean -A_i * log pi_i(completion)``; tokens after the EOS are not scored.

    * Group baselines (``magrpo``: minus the mean, ``mareinforce``: raw, ``maremax``: minus the max,
      ``marloo``: leave-one-out): each agent's advantages come from its group of ``G`` returns and,
      with ``advantage_normalization``, are divided by the group's std without re-centering, so the
      four stay different algorithms.
    * Critics (``maac``: one :class:`~comlrl_lightning.critics.SharedCritic`; ``iac``:
      :class:`~comlrl_lightning.critics.IndividualCritics`): ``A_i = R̃_i - V_i``, standardised over the
      batch with ``advantage_normalization``; the critic loss (squared error to ``R̃_i``) is added
      with the critic's ``value_loss_coef``.

    Args:
        rl_algorithm: ``magrpo``, ``mareinforce``, ``maremax``, ``marloo``, ``maac`` or ``iac``.
        num_generations: G samples per agent per item (>= 2 for the group baselines, >= 1 with a critic).
        advantage_normalization: scale (group baselines) or standardise (critics) the advantages.
        reference_kl: penalise the k3 KL to the initial policy (:class:`ReferenceKL`: its ``coef``
            and the reference copies' ``devices``); ``None``: no penalty.
        critic: the critic of ``maac`` / ``iac`` with its own options (``None``: the algorithm's
            default critic); refused with the group baselines.
        **kwargs: team, optimizer and sampling options of :class:`TeamModule`.
    """

    trains_on = "items"

    def __init__(
        self,
        rl_algorithm: RLAlgorithm = "magrpo",
        num_generations: int = 4,
        advantage_normalization: bool = True,
        reference_kl: Optional[ReferenceKL] = None,
        critic: Optional[Critic] = None,
        **kwargs: Any,
    ) -> None:
        algorithm = choice("rl_algorithm", rl_algorithm or "magrpo", RL_ALGORITHMS)
        self._check_critic(algorithm, critic)
        check_num_generations(algorithm, num_generations)
        super().__init__(**kwargs)
        if reference_kl is not None and isinstance(reference_kl.devices, list):
            resolve_devices(reference_kl.devices, self.num_agents, "reference_kl.devices", [])
        self.rl_algorithm, self.baseline = algorithm, GROUP_BASELINES.get(algorithm)
        self.num_generations = num_generations
        self.advantage_normalization = advantage_normalization
        self.reference_kl = reference_kl
        self.reference: Optional[Team] = None
        self.critic: Optional[Critic] = (
            critic if critic is not None else (CRITICS[algorithm]() if algorithm in CRITICS else None)
        )
        self.save_hyperparameters(ignore=NOT_HYPERPARAMETERS)

    @staticmethod
    def _check_critic(algorithm: str, critic: Optional[Critic]) -> None:
        if critic is None:
            return
        if algorithm not in CRITICS:
            raise OptionError(f"critic is used by rl_algorithm maac or iac, not by {algorithm}.")
        if critic.algorithm != algorithm:
            raise OptionError(
                f"critic {type(critic).__name__} belongs to rl_algorithm='{critic.algorithm}', "
                f"not '{algorithm}' (use {CRITICS[algorithm].__name__})."
            )

    def shard(self, mesh) -> None:
        super().shard(mesh)
        if self.critic is not None:  # trainable: sharded like the agents, so its gradients are reduced too
            for child in self.critic.children():
                for part in child if isinstance(child, torch.nn.ModuleList) else [child]:  # a list has no forward
                    if any(p.requires_grad for p in part.parameters()):
                        shard_model(part, mesh, str(self.trainer.precision))

    def configure_parts(self) -> None:
        super().configure_parts()
        if self.critic is not None and not self.critic.has_networks:
            self.critic.build(self.team, self.agent_sources, self.seed)
        if self.reference_kl is not None and self.reference is None and not self.team.is_lora:
            # a frozen copy of the initial policy (configure_model runs before a checkpoint is restored)
            devices = resolve_devices(
                self.reference_kl.devices,
                self.num_agents,
                "reference_kl.devices",
                [str(self.team.device_of(i)) for i in range(self.num_agents)],
            )
            agents = [copy.deepcopy(agent).to(device) for agent, device in zip(self.team.agents, devices)]
            self.reference = Team(agents, tokenizers=list(self.team.tokenizers)).requires_grad_(False).eval()

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.critic is not None:
            self.critic.place(self.team)
        # a reward model, a reference copy and critics stay in eval mode on purpose (as the reference's)
        expect_eval_mode_parts(self)

    def parameter_groups(self) -> List[Dict[str, Any]]:
        groups = super().parameter_groups()
        if self.critic is not None:
            groups += self.critic.parameter_groups(self.learning_rates)
        return groups

    def reference_model(self, agent: int):
        """The frozen initial policy of ``agent``: a copy, or for a LoRA team the base with adapters disabled."""
        if self.reference is not None:
            return self.reference.agents[agent]
        return self.team.lora_agent(agent).base_model_view()

    # ------------------------------------------------------------------------------------------
    # Rollouts

    def joint_returns(
        self, items: List[Dict[str, Any]], prompts: List[List[str]], texts: List[List[List[str]]]
    ) -> torch.Tensor:
        """``[items, G]`` returns of the joint responses; ``texts[agent][item][g]``. Here: the task reward."""
        oracle = data_side(self.trainer).task.oracle
        requests = [([per_agent[k] for per_agent in texts], prompts[k], item) for k, item in enumerate(items)]
        rows = [processed for _, processed in score_requests(oracle, requests)]
        return torch.tensor(rows, dtype=torch.float32, device=self.device)

    def sample_rollouts(
        self, items: Sequence[Dict[str, Any]], prompts: List[List[str]]
    ) -> List[List[List[Completion]]]:
        """``G`` joint answers per item, sampled as a round and an evaluation sample theirs
        (:func:`~comlrl_lightning.rounds.trajectories.sample_joint` of the team's sampler) from a stream
        derived from the step, returned agent by agent: ``[agent][item][g]``."""
        stream = RandomStream.derive(self.seed, "rollout", self.global_step, self.global_rank)
        sampler = team_sampler(self.generator, self.team, self.generation_settings, stream)
        with self.generation_context():
            joint = sample_joint(sampler, items, prompts, self.num_generations)
        return agent_major(joint, self.num_agents)

    def score_team(
        self, prompts: List[List[str]], samples: List[List[List[Completion]]]
    ) -> Tuple[List[torch.Tensor], List[Optional[torch.Tensor]]]:
        """Every agent's ``[items * G]`` sequence log-probs (with grad) and, with the reference KL,
        its ``[items, G]`` KL; ``samples[agent][item][g]``. A LoRA team scores every agent in one
        pass of its base, and the reference rows of every agent in one more (adapters disabled,
        without grad: in the trained pass they would cost a backward for nothing)."""
        batches = [self.rollout_batch(agent, prompts, samples[agent]) for agent in range(self.num_agents)]
        token_logprobs = self.team.score(batches)
        kls: List[Optional[torch.Tensor]] = [None] * self.num_agents
        if self.reference_kl is not None:
            with torch.no_grad():
                references = self.team.score(
                    batches, models=[self.reference_model(agent) for agent in range(self.num_agents)]
                )
            kls = [
                k3_kl(logprobs.detach(), reference, batch["score_mask"]).view(len(prompts), self.num_generations)
                for logprobs, reference, batch in zip(token_logprobs, references, batches)
            ]
        sequences = [(logprobs * batch["score_mask"]).sum(dim=-1) for logprobs, batch in zip(token_logprobs, batches)]
        return sequences, kls

    def rollout_batch(self, agent: int, prompts: List[List[str]], samples: List[List[Completion]]) -> Dict[str, Any]:
        """Agent ``agent``'s rollouts as a :func:`pack_sequences` batch on the module's device, every token scored."""
        group = self.num_generations
        prompt_ids = [ids for ids in self.team.encode_prompts(agent, [p[agent] for p in prompts]) for _ in range(group)]
        completions = [c.ids for row in samples for c in row]
        batch = pack_sequences(
            prompt_ids, completions, [len(c) for c in completions], self.team.tokenizers[agent].pad_token_id
        )
        return {k: v.to(self.device) for k, v in batch.items()}

    # ------------------------------------------------------------------------------------------
    # The update

    def training_step(self, items: List[Dict[str, Any]], batch_idx: int) -> Optional[torch.Tensor]:
        task = data_side(self.trainer).task
        prompts = [task.prompts(item) for item in items]
        samples = self.sample_rollouts(items, prompts)
        texts = [[[c.text for c in row] for row in agent] for agent in samples]
        returns = self.joint_returns(items, prompts, texts)
        logprobs, kls = self.score_team(prompts, samples)
        present = [kl for kl in kls if kl is not None]  # every agent's with the reference KL, else none
        coef = self.reference_kl.coef if self.reference_kl is not None else 0.0
        # R̃_i: the joint return minus agent i's KL penalty, [N, items, G]
        shaped = torch.stack([returns - coef * kl for kl in present] if present else [returns] * self.num_agents)
        metrics: Dict[str, Union[torch.Tensor, float]] = {}
        if self.critic is None:
            baseline = self.baseline
            assert baseline is not None  # without a critic the algorithm is a group-baseline one
            losses = [
                policy_gradient_loss(
                    logprobs[i], group_advantages(shaped[i], baseline, self.advantage_normalization).reshape(-1)
                )
                for i in range(self.num_agents)
            ]
            loss = torch.stack(losses).sum()
        else:
            loss, critic_metrics = self.actor_critic_loss(prompts, texts, logprobs, shaped)
            metrics.update(critic_metrics)
        if self.skip_nonfinite(loss):
            return None
        if self.rollout_metrics is not None:
            rollouts = RolloutSamples.of_update(task, items, texts, returns.tolist(), shaped.tolist())
            metrics.update(domain_metrics(self.rollout_metrics, rollouts, prefix=""))
        metrics.update(
            {
                "train/loss": loss.detach(),
                "turn_1/reward_mean": returns.mean(),
                "turn_1/expected_return": returns.mean(),
            }
        )
        if present:
            kl_mean = torch.stack(present).mean()
            metrics.update({"turn_1/reference_kl_mean": kl_mean, "turn_1/reference_kl_penalty_mean": coef * kl_mean})
        self.log_dict(metrics, batch_size=len(items))
        return loss

    rollout_metrics: Optional[RolloutMetrics] = None
    """Domain metrics of every update's rollouts, logged under the returned keys (a callable, set
    from Python; see :mod:`comlrl_lightning.modules.evaluation_metrics`)."""

    def actor_critic_loss(
        self, prompts: List[List[str]], texts: List[List[List[str]]], logprobs: List[torch.Tensor], shaped: torch.Tensor
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``sum_i mean(-A_i log pi_i) + value_loss_coef * critic loss`` with ``A_i = R̃_i - V_i``, and its metrics."""
        assert self.critic is not None  # training_step calls it only with a critic
        values = self.critic.values(self.team, prompts, texts).to(shaped.device)
        actor_losses, advantages = [], []
        for i in range(self.num_agents):
            advantage = actor_critic_advantages(shaped[i], values[i], self.advantage_normalization)
            actor_losses.append(policy_gradient_loss(logprobs[i], advantage.reshape(-1)))
            advantages.append(advantage)
        critic_loss = self.critic.loss(values, shaped)
        loss = torch.stack(actor_losses).sum() + self.critic.value_loss_coef * critic_loss
        metrics = {
            "train/value_loss": critic_loss.detach(),
            "train/value_mean": values.detach().mean(),
            "train/advantage_mean": torch.stack(advantages).mean(),
            "train/explained_variance": explained_variance(values, shaped),
        }
        metrics.update({f"train/agent_{i}/actor_loss": actor_losses[i].detach() for i in range(self.num_agents)})
        return loss, metrics
