"""Shared fixtures: tiny runs on the embedded default, built in a per-session cache folder."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("COMLRL_LIGHTNING_CACHE", tempfile.mkdtemp(prefix="comlrl-lightning-cache-"))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

TINY_MODEL = dict(
    agent_model="embedded",
    num_agents=2,
    max_new_tokens=6,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    agent_learning_rate=3e-3,
)
TINY_DATA = dict(
    train_dataset="embedded",
    eval_dataset="embedded",
    preference_num_candidates=4,
    preference_pairs_per_sample=4,
    train_batch_size=8,
    num_train_epochs=2,
    eval_num_samples=4,
    eval_batch_size=4,
)


def tiny_trainer(tmp_path, **overrides):
    from lightning.pytorch import Trainer

    options = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=TINY_DATA["num_train_epochs"],
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        val_check_interval=4,
    )
    options.update(overrides)
    return Trainer(**options)


@pytest.fixture
def tiny_run(tmp_path):
    """Factory for (module, datamodule, trainer) on the embedded default with tiny sizes."""
    from comlrl_lightning import MADPOModule, PreferenceDataModule

    def make(model=None, data=None, trainer=None):
        module = MADPOModule(**{**TINY_MODEL, **(model or {})})
        datamodule = PreferenceDataModule(**{**TINY_DATA, **(data or {})})
        return module, datamodule, tiny_trainer(tmp_path, **(trainer or {}))

    return make
