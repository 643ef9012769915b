"""MARLHFModule: fit a joint Bradley–Terry reward model on the round's pairs, then policy gradient on it."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Literal, Optional, get_args

import torch

from comlrl_lightning.contracts import data_side
from comlrl_lightning.joint_reward import JointRewardModel, RewardModelFit, RewardModelOracle, RewardScorer
from comlrl_lightning.losses import bradley_terry_metrics
from comlrl_lightning.modules.base import NOT_HYPERPARAMETERS
from comlrl_lightning.modules.magrpo import MAGRPOModule
from comlrl_lightning.modules.optim import adamw
from comlrl_lightning.runtime.rng import derived_seed
from comlrl_lightning.validation import choice

ScoringReward = Literal["task", "reward_model"]
"""What scores an iterative MARLHF run's comparisons: the task reward, or the previous round's reward model."""
SCORING_REWARDS = get_args(ScoringReward)


class MARLHFModule(MAGRPOModule):
    """Multi-agent RLHF: a fresh joint reward model is fitted on every round's preference pairs, then
    the team is trained with a MAGRPO-family backend on the learned reward.

    Use it with :class:`~comlrl_lightning.PreferenceDataModule` (collect once, fit, then
    ``num_train_epochs`` RL epochs over the task items) or
    :class:`~comlrl_lightning.IterativePreferenceDataModule` (per round: pairs, replay, a fresh reward
    model fit, then ``num_train_epochs`` RL epochs). The fit happens at the first batch of the
    round, before its first policy update; the fitted weights are part of every checkpoint, so a
    resumed run does not refit. Evaluation always uses the task reward. With ``rl_algorithm: maac``
    or ``iac`` the policy phase is actor-critic, and the critics persist across rounds.

    Args:
        reward_model: the reward model and its per-round fit (:class:`~comlrl_lightning.joint_reward.RewardModelFit`:
            ``model_name`` (default: agent 0's model), ``learning_rate``, ``max_length``,
            ``freeze_backbone``, ``num_train_epochs``, ``train_batch_size``).
        preference_scoring_reward: iterative collection scores comparisons with the ``task`` reward, or
            with the previous round's ``reward_model`` (the task reward while there is none).
        **kwargs: the options of :class:`MAGRPOModule` and :class:`TeamModule`.
    """

    def __init__(
        self,
        reward_model: RewardModelFit = RewardModelFit(),
        preference_scoring_reward: ScoringReward = "task",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.preference_scoring_reward = choice("preference_scoring_reward", preference_scoring_reward, SCORING_REWARDS)
        self.reward_options = reward_model
        self.scorer: Optional[RewardScorer] = None
        self.reward_model: Optional[JointRewardModel] = None
        self.fitted_round: Optional[int] = None
        self._fresh_reward_state: Optional[Dict[str, torch.Tensor]] = None
        self.save_hyperparameters(ignore=NOT_HYPERPARAMETERS)

    def configure_parts(self) -> None:
        super().configure_parts()
        if self.scorer is None:
            options = self.reward_options
            source = options.model_name or self.agent_sources[0]
            tokenizer = None if isinstance(source, str) else self.team.tokenizers[0]
            self.scorer = RewardScorer.from_source(
                source, tokenizer, options.max_length, options.freeze_backbone, self.team.loading
            )
            self.reward_model = self.scorer.model  # a submodule: moved by Lightning, saved in checkpoints
            self.reward_model.requires_grad_(False).eval()
            self._fresh_reward_state = copy.deepcopy(self.reward_model.state_dict())

    def built_scorer(self) -> RewardScorer:
        """The reward model's scorer (:meth:`configure_parts` builds it)."""
        if self.scorer is None:
            raise RuntimeError("MARLHFModule: configure_model builds the reward model first.")
        return self.scorer

    # ------------------------------------------------------------------------------------------
    # Reward model fit, once per round, before the round's first update

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # At the first batch, not at epoch start: a run resumed from a checkpoint taken after a
        # round's last step reaches the next round's epoch start before its data module has built
        # the round, while a batch always comes from the built round.
        round_index, pairs = data_side(self.trainer).round_pairs()
        if pairs and round_index is not None and round_index != self.fitted_round:
            self.fit_reward_model(pairs, round_index)

    def fit_reward_model(self, pairs: List, round_index: int = 0) -> Dict[str, float]:
        """A fresh reward model (initial backbone, seeded new head) fitted with Bradley–Terry on ``pairs``.

        Every epoch's ``reward_model/{loss,accuracy,margin}`` (means over the epoch's pairs, taken
        while it trains) is logged with ``reward_model/epoch`` (1-based) and ``reward_model/iteration``
        (the round, 1-based like ``iter/current_iteration``), all at the round's current step: the fit
        happens between two updates, so its rows share one step and loggers keep a non-decreasing
        step. Returns the last epoch's metrics.
        """
        model, fresh = self.reward_model, self._fresh_reward_state
        if model is None or fresh is None:
            raise RuntimeError("MARLHFModule.fit_reward_model: configure_model builds the reward model first.")
        model.load_state_dict(fresh)
        generator = torch.Generator().manual_seed(derived_seed(self.seed, "reward_model_head", round_index))
        with torch.no_grad():
            model.head.weight.copy_(
                torch.empty_like(model.head.weight).uniform_(-1, 1, generator=generator) / model.head.in_features**0.5
            )
            model.head.bias.zero_()
        model.head.requires_grad_(True)
        model.backbone.requires_grad_(not self.reward_options.freeze_backbone)
        optimizer = adamw([p for p in model.parameters() if p.requires_grad], lr=self.reward_options.learning_rate)
        model.train()
        metrics: Dict[str, float] = {}
        with torch.enable_grad():
            for epoch in range(1, self.reward_options.num_train_epochs + 1):
                metrics = self._reward_model_epoch(pairs, optimizer, generator)
                self.log_metrics_now(
                    {**metrics, "reward_model/epoch": float(epoch), "reward_model/iteration": float(round_index + 1)}
                )
        model.requires_grad_(False).eval()
        self.fitted_round = round_index
        return metrics

    def _reward_model_epoch(
        self, pairs: List, optimizer: torch.optim.Optimizer, generator: torch.Generator
    ) -> Dict[str, float]:
        """One shuffled pass of Bradley–Terry steps; the epoch's mean loss, accuracy (share of pairs
        scored winner > loser) and margin (winner score minus loser score), each taken before its step."""
        totals = {"loss": 0.0, "accuracy": 0.0, "margin": 0.0}
        order = torch.randperm(len(pairs), generator=generator).tolist()
        size = self.reward_options.train_batch_size
        for start in range(0, len(order), size):
            batch = [pairs[i] for i in order[start : start + size]]
            optimizer.zero_grad(set_to_none=True)
            loss, chosen, rejected = self.built_scorer().accumulate_pair_loss(
                batch, self.reward_options.micro_batch_size
            )
            optimizer.step()
            totals["loss"] += loss * len(batch)
            for key, per_pair in bradley_terry_metrics(chosen, rejected).items():
                totals[key] += per_pair.sum().item()
        return {f"reward_model/{key}": value / len(pairs) for key, value in totals.items()}

    # ------------------------------------------------------------------------------------------
    # Rewards

    @torch.no_grad()
    def joint_returns(self, items, prompts, texts) -> torch.Tensor:
        """Reward-model scores of the joint responses (no reward processor); the task reward before any fit."""
        if self.fitted_round is None:
            return super().joint_returns(items, prompts, texts)
        group = len(texts[0][0])
        joint_prompts = [prompts[k] for k in range(len(items)) for _ in range(group)]
        joint = [[texts[a][k][g] for a in range(len(texts))] for k in range(len(items)) for g in range(group)]
        return self.built_scorer().predicted_rewards(joint_prompts, joint).view(len(items), group).to(self.device)

    def collection_oracle(self, task):
        if self.preference_scoring_reward == "reward_model" and self.fitted_round is not None:
            return RewardModelOracle(self.scorer)
        return task.oracle

    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["reward_model_fitted_round"] = self.fitted_round

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.fitted_round = checkpoint.get("reward_model_fitted_round")
