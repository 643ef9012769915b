"""RoundFilesDataModule: the preference pairs of stored round files, for fitting a reward model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.round_records import ROUND_FILE_LIMIT
from comlrl_lightning.runtime.files import read_bounded
from comlrl_lightning.validation import at_least, require


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

    def __init__(
        self,
        replay_dir: str = "runs/madpo_iter/preference_replay",
        reward_train_batch_size: int = 8,
        val_fraction: float = 0.2,
        num_train_epochs: int = 5,
        seed: int = 0,
    ) -> None:
        super().__init__()
        at_least("reward_train_batch_size", reward_train_batch_size, 1)
        at_least("num_train_epochs", num_train_epochs, 1)
        self.num_train_epochs = num_train_epochs
        require(0 <= val_fraction < 1, "val_fraction must be in [0, 1).")
        self.replay_dir, self.batch_size, self.val_fraction, self.seed = (
            replay_dir,
            reward_train_batch_size,
            val_fraction,
            seed,
        )
        self.train_pairs: List[PreferencePair] = []
        self.val_pairs: List[PreferencePair] = []

    def setup(self, stage: str) -> None:
        path = Path(self.replay_dir)
        files = [path] if path.is_file() else sorted(path.glob("iteration_*.json"))
        require(bool(files), f"replay_dir: no iteration_NNNN.json round files in {path}.")
        records: List[Dict[str, Any]] = []
        for file in files:
            payload = json.loads(read_bounded(file, ROUND_FILE_LIMIT, "a replay round file").decode("utf-8"))
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
        return DataLoader(
            self.train_pairs,  # type: ignore[arg-type]  # a list is a map-style dataset; torch's hint names only Dataset
            batch_size=self.batch_size,
            shuffle=True,
            generator=generator,
            collate_fn=list,
        )

    def val_dataloader(self):
        return DataLoader(self.val_pairs, batch_size=self.batch_size, collate_fn=list) if self.val_pairs else []
