"""RewardModelModule: fit a joint Bradley–Terry reward model on preference pairs (e.g. stored round files)."""

from __future__ import annotations

from typing import List, Optional

import torch
from lightning.pytorch import LightningModule

from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.joint_reward import RewardModelOptions, RewardScorer
from comlrl_lightning.losses import bradley_terry_metrics
from comlrl_lightning.modules.optim import adamw
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.runtime.hparams import PlainHyperparameters
from comlrl_lightning.runtime.quiet import expect_eval_mode_parts


class RewardModelModule(PlainHyperparameters, LightningModule):
    """Fits a :class:`~comlrl_lightning.joint_reward.JointRewardModel` with the Bradley–Terry loss.

    Logs ``reward_model/loss``, ``reward_model/accuracy`` (share of pairs scored winner > loser) and
    ``reward_model/margin`` for training and, under ``val/``, for held-out pairs. Its batches and
    epochs are the data module's (:class:`~comlrl_lightning.RoundFilesDataModule`).

    Args:
        reward_model: the reward model and its optimizer
            (:class:`~comlrl_lightning.joint_reward.RewardModelOptions`: ``model_name``, default the
            embedded model; ``learning_rate``, ``max_length``, ``freeze_backbone``).
    """

    def __init__(self, reward_model: RewardModelOptions = RewardModelOptions(model_name=EMBEDDED)) -> None:
        super().__init__()
        self.options = reward_model
        self.save_hyperparameters()
        self.scorer: Optional[RewardScorer] = None
        self.reward_model: Optional[torch.nn.Module] = None

    def configure_model(self) -> None:
        if self.scorer is None:
            options = self.options
            source = options.model_name or EMBEDDED
            self.scorer = RewardScorer.from_source(source, None, options.max_length, options.freeze_backbone)
            self.reward_model = self.scorer.model

    def on_fit_start(self) -> None:
        # the backbone trains in the eval mode it was loaded in (no dropout), as MARLHF's reward fit does
        expect_eval_mode_parts(self)

    def _step(self, pairs: List[PreferencePair], prefix: str) -> torch.Tensor:
        assert self.scorer is not None, "configure_model builds the scorer"
        loss, chosen, rejected = self.scorer.pair_loss(pairs)
        metrics = {"loss": loss.detach(), **{k: v.mean() for k, v in bradley_terry_metrics(chosen, rejected).items()}}
        self.log_dict(
            {f"{prefix}reward_model/{key}": value for key, value in metrics.items()},
            batch_size=len(pairs),
            on_epoch=True,
            on_step=prefix == "",
        )
        return loss

    def training_step(self, pairs: List[PreferencePair], batch_idx: int) -> torch.Tensor:
        return self._step(pairs, "")

    def validation_step(self, pairs: List[PreferencePair], batch_idx: int) -> None:
        self._step(pairs, "val/")

    def configure_optimizers(self):
        return adamw([p for p in self.reward_model.parameters() if p.requires_grad], lr=self.options.learning_rate)
