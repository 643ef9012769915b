"""A two-process (gloo, ddp_fork) MADPO run sampling with VLLMGenerator, for tests/generation/test_vllm.py.

``python -m tests.helpers.vllm_ddp_run MODEL_FOLDER OUT`` writes ``OUT/rank_<r>.json`` per process (a digest
of its final weights, the pairs it trained on and its batch count). It runs as its own process so that no engine of
the test process is inherited by the forked ranks.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import tiny_sampling, tiny_task, tiny_team
from tests.runtime.test_ddp import RecordPerRank  # weights digest, pairs and batches per rank

DDP_MODEL = dict(sampling=tiny_sampling(), agent_learning_rate=3e-3)
DDP_DATA = dict(
    task=tiny_task(),
    preference_num_candidates=4,
    preference_pairs_per_sample=4,
    train_batch_size=8,
    num_train_epochs=1,
    eval_num_samples=5,
    eval_batch_size=2,
)


def main(model: str, out: Path) -> None:
    import torch
    from lightning.pytorch import Trainer

    from comlrl_lightning import MADPOModule, PreferenceDataModule
    from comlrl_lightning.generation.vllm import VLLMGenerator

    torch.set_num_threads(1)
    module = MADPOModule(team=tiny_team(agent_model=model), generator=VLLMGenerator(), **DDP_MODEL)
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_fork",
        max_epochs=1,
        default_root_dir=str(out),
        enable_progress_bar=False,
        enable_model_summary=False,
        check_val_every_n_epoch=None,
        val_check_interval=1000,
        logger=False,
        enable_checkpointing=False,
        callbacks=[RecordPerRank(out)],
    )
    trainer.fit(module, PreferenceDataModule(**DDP_DATA))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
