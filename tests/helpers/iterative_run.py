"""A tiny iterative run used by the tests, also as a process that kills itself mid-round.

:func:`killed_run` (in a forked process: tests/helpers/forks.py), or
``python -m tests.helpers.iterative_run ROOT KILL_WHERE``, runs 3 rounds in ROOT and SIGKILLs itself
in round 2 during collection (``collection``) or while the round file is being replaced (``write``).
"""

from __future__ import annotations

import os
import signal
import sys

from comlrl_lightning import (
    HistoryComparator,
    IterativePreferenceDataModule,
    LambdaDecayReplay,
    MADPOModule,
)
from comlrl_lightning.defaults import vowel_length_reward
from tests.conftest import tiny_sampling, tiny_task, tiny_team

ITER_DATA = dict(
    task=tiny_task(),
    num_iterations=3,
    num_train_epochs=2,
    preference_num_candidates=4,
    preference_pairs_per_sample=4,
    train_batch_size=8,
    eval_num_samples=4,
    eval_batch_size=4,
)


def iter_data(**overrides):
    """The tiny run's data options with fresh part objects (a comparator is bound to one data module)."""
    parts = dict(comparator=HistoryComparator(k=1, num_candidates=4), replay=LambdaDecayReplay(lam=0.5, sample_size=24))
    return {**ITER_DATA, **parts, **overrides}


ITER_MODEL = dict(team=tiny_team(), sampling=tiny_sampling(), agent_learning_rate=3e-3)


def make_trainer(root, **overrides):
    from lightning.pytorch import Trainer

    options = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=6,
        default_root_dir=str(root),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        check_val_every_n_epoch=None,
        val_check_interval=2,
        reload_dataloaders_every_n_epochs=1,
    )
    options.update(overrides)
    # as the command line and the seed API build it: checkpoints written atomically, with their files
    from comlrl_lightning.checkpoints.io import atomic_checkpoint_plugins

    options["plugins"] = atomic_checkpoint_plugins(options.get("plugins"))
    return Trainer(**options)


def make_run(root, data=None, model=None, **trainer_overrides):
    module = MADPOModule(**{**ITER_MODEL, **(model or {})})
    datamodule = IterativePreferenceDataModule(**iter_data(**(data or {})))
    return module, datamodule, make_trainer(root, **trainer_overrides)


class KillingDataModule(IterativePreferenceDataModule):
    """Dies (SIGKILL, no clean-up) in round 2, during collection or inside the round-file write."""

    def __init__(self, kill_where: str, **kwargs):
        super().__init__(**kwargs)
        self.kill_where = kill_where

    def build_round(self, round_index, module):
        if round_index == 1:
            if self.kill_where == "collection":

                def dying_reward(writer, matcher):
                    os.kill(os.getpid(), signal.SIGKILL)

                self.task.oracle.reward_func = dying_reward
            elif self.kill_where == "write":
                real_replace = os.replace

                def dying_replace(source, target):
                    if str(target).endswith("iteration_0002.json"):
                        os.kill(os.getpid(), signal.SIGKILL)
                    real_replace(source, target)

                os.replace = dying_replace
        super().build_round(round_index, module)


def killed_run(root: str, kill_where: str) -> None:
    """The run that SIGKILLs itself in round 2 (see :class:`KillingDataModule`), a checkpoint per round."""
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    torch.set_num_threads(1)
    checkpoint = ModelCheckpoint(
        dirpath=os.path.join(root, "ckpt"), save_top_k=-1, every_n_epochs=1, save_on_train_epoch_end=True
    )
    module = MADPOModule(**ITER_MODEL)
    datamodule = KillingDataModule(kill_where, **iter_data(task=tiny_task(reward_func=vowel_length_reward)))
    make_trainer(root, callbacks=[checkpoint]).fit(module, datamodule)


if __name__ == "__main__":
    killed_run(sys.argv[1], sys.argv[2])
