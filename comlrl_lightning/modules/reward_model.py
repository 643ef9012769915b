"""RewardModelModule and RoundFilesDataModule: fit a joint reward model on stored round files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from torch.utils.data import DataLoader

from ..defaults import EMBEDDED
from ..optim import adamw
from ..options import at_least, positive, require
from ..pairs import PreferencePair
from ..reward_model import RewardScorer


class RewardModelModule(LightningModule):
    """Fits a :class:`~comlrl_lightning.reward_model.JointRewardModel` with the Bradley–Terry loss.

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
            self.scorer = RewardScorer.from_source(hp.reward_model_name, None, hp.reward_max_length, hp.reward_freeze_backbone)
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
        return adamw([p for p in self.reward_model.parameters() if p.requires_grad], lr=self.hparams.reward_learning_rate)


class RoundFilesDataModule(LightningDataModule):
    """Preference pairs from a folder of ``iteration_NNNN.json`` round files (or one file).

    Unlike iterative training, which never imports old files, this module exists to read them:
    every record of every round file in ``replay_dir`` is loaded, shuffled with ``seed`` and split
    into training and held-out pairs.

    Args:
        replay_dir: a folder of round files, or one round file.
        reward_train_batch_size: pairs per step.
        val_fraction: share of pairs held out for ``val/reward_model/accuracy`` (0 <= f < 1).
        num_train_epochs: Bradley–Terry epochs (the CLI sets ``trainer.max_epochs`` from it).
        seed: seed of the split and of the shuffles.
    """

    def __init__(self, replay_dir: str = "runs/madpo_iter/preference_replay", reward_train_batch_size: int = 8,
                 val_fraction: float = 0.2, num_train_epochs: int = 5, seed: int = 0) -> None:
        super().__init__()
        at_least("reward_train_batch_size", reward_train_batch_size, 1)
        at_least("num_train_epochs", num_train_epochs, 1)
        self.num_train_epochs = num_train_epochs
        require(0 <= val_fraction < 1, "val_fraction must be in [0, 1).")
        self.replay_dir, self.batch_size, self.val_fraction, self.seed = replay_dir, reward_train_batch_size, val_fraction, seed
        self.train_pairs: List[PreferencePair] = []
        self.val_pairs: List[PreferencePair] = []

    def setup(self, stage: str) -> None:
        path = Path(self.replay_dir)
        files = [path] if path.is_file() else sorted(path.glob("iteration_*.json"))
        require(bool(files), f"replay_dir: no iteration_NNNN.json round files in {path}.")
        records: List[Dict[str, Any]] = []
        for file in files:
            payload = json.loads(file.read_text(encoding="utf-8"))
            records += payload["pairs"] if isinstance(payload, dict) else payload
        require(bool(records), f"replay_dir: the round files in {path} hold no pairs.")
        num_agents = max(len(record.get("prompts") or []) for record in records)
        pairs = [PreferencePair.from_record(record, num_agents) for record in records]
        order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(self.seed)).tolist()
        held_out = int(len(pairs) * self.val_fraction)
        self.val_pairs = [pairs[i] for i in order[:held_out]]
        self.train_pairs = [pairs[i] for i in order[held_out:]]

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.seed + 1)
        return DataLoader(self.train_pairs, batch_size=self.batch_size, shuffle=True, generator=generator, collate_fn=list)

    def val_dataloader(self):
        return DataLoader(self.val_pairs, batch_size=self.batch_size, collate_fn=list) if self.val_pairs else []
