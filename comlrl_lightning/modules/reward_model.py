"""RewardModelModule: fit a joint Bradley–Terry reward model on preference pairs (e.g. stored round files)."""

from __future__ import annotations

from typing import List, Optional

import torch
from lightning.pytorch import LightningModule

from comlrl_lightning.data.pairs import PreferencePair
from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.models.joint_reward import RewardScorer
from comlrl_lightning.modules.optim import adamw
from comlrl_lightning.options import at_least, positive


class RewardModelModule(LightningModule):
    """Fits a :class:`~comlrl_lightning.models.JointRewardModel` with the Bradley–Terry loss.

    Logs ``reward_model/loss``, ``reward_model/accuracy`` (share of pairs scored winner > loser) and
    ``reward_model/margin`` for training and, under ``val/``, for held-out pairs.

    Args:
        reward_model_name: backbone (hub id, local path or ``"embedded"``).
        reward_learning_rate: AdamW learning rate (> 0).
        reward_max_length: token budget of a joint text (prompts are shortened before responses).
        reward_freeze_backbone: train only the scalar head.
    """

    def __init__(
        self,
        reward_model_name: str = EMBEDDED,
        reward_learning_rate: float = 1e-5,
        reward_max_length: Optional[int] = None,
        reward_freeze_backbone: bool = False,
    ) -> None:
        super().__init__()
        positive("reward_learning_rate", reward_learning_rate)
        if reward_max_length is not None:
            at_least("reward_max_length", reward_max_length, 1, allow_none=True)
        self.save_hyperparameters()
        self.scorer: Optional[RewardScorer] = None
        self.reward_model: Optional[torch.nn.Module] = None

    def configure_model(self) -> None:
        if self.scorer is None:
            hp = self.hparams
            self.scorer = RewardScorer.from_source(
                hp.reward_model_name, None, hp.reward_max_length, hp.reward_freeze_backbone
            )
            self.reward_model = self.scorer.model

    def _step(self, pairs: List[PreferencePair], prefix: str) -> torch.Tensor:
        loss, chosen, rejected = self.scorer.pair_loss(pairs)
        metrics = {
            f"{prefix}reward_model/loss": loss.detach(),
            f"{prefix}reward_model/accuracy": (chosen > rejected).float().mean(),
            f"{prefix}reward_model/margin": (chosen - rejected).detach().mean(),
        }
        self.log_dict(metrics, batch_size=len(pairs), on_epoch=True, on_step=prefix == "")
        return loss

    def training_step(self, pairs: List[PreferencePair], batch_idx: int) -> torch.Tensor:
        return self._step(pairs, "")

    def validation_step(self, pairs: List[PreferencePair], batch_idx: int) -> None:
        self._step(pairs, "val/")

    def configure_optimizers(self):
        return adamw(
            [p for p in self.reward_model.parameters() if p.requires_grad], lr=self.hparams.reward_learning_rate
        )
