"""read_checkpoint_metadata under the reference's module name: a seed-API checkpoint's record."""

from __future__ import annotations

import pytest

from comlrl_lightning.checkpoints.metadata import read_checkpoint_metadata as runtime_reader
from comlrl_lightning.trainers.configs import MADPOConfig
from comlrl_lightning.trainers.preference import MADPOTrainer
from comlrl_lightning.utils import read_checkpoint_metadata
from comlrl_lightning.utils.checkpoint import read_checkpoint_metadata as module_reader


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_reader_is_the_runtimes_and_reads_the_reference_fields(tmp_path):
    assert read_checkpoint_metadata is module_reader is runtime_reader
    trainer = MADPOTrainer(
        agent_model="embedded",
        args=MADPOConfig(num_train_epochs=1, max_new_tokens=4, preference_num_candidates=2, eval_interval=0),
        wandb_config={"output_dir": str(tmp_path)},
    )
    trainer.train(checkpoint_dir=str(tmp_path / "ckpt"))
    metadata = read_checkpoint_metadata(str(tmp_path / "ckpt"))
    assert metadata["version"] == 1 and metadata["trainer_class"] == "MADPOTrainer"
    assert metadata["sequence"] >= 1 and len(metadata["run_id"]) == 32 and metadata["wandb"] is None
