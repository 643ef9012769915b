"""A two-process (gloo, ddp_fork) MADPO run sampling with VLLMGenerator, for tests/test_vllm_generator.py.

``python -m tests.vllm_ddp_run MODEL_FOLDER OUT`` writes ``OUT/rank_<r>.json`` per process (a digest
of its final weights and the pairs it trained on). It runs as its own process so that no engine of
the test process is inherited by the forked ranks.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from lightning.pytorch import Callback

DDP_MODEL = dict(num_agents=2, max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None, agent_learning_rate=3e-3)
DDP_DATA = dict(train_dataset="embedded", eval_dataset="embedded", preference_num_candidates=4,
                preference_pairs_per_sample=4, train_batch_size=8, num_train_epochs=1, eval_num_samples=5,
                eval_batch_size=2)


class RecordPerRank(Callback):
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def on_train_end(self, trainer, pl_module) -> None:
        digest = hashlib.sha256()
        for key, value in sorted(pl_module.team.state_dict().items()):
            digest.update(key.encode())
            digest.update(value.detach().cpu().numpy().tobytes())
        record = {"weights": digest.hexdigest(), "pairs": [pair.to_record() for pair in trainer.datamodule.pairs],
                  "steps": trainer.global_step}
        (self.directory / f"rank_{trainer.global_rank}.json").write_text(json.dumps(record))


def main(model: str, out: Path) -> None:
    import torch
    from lightning.pytorch import Trainer

    from comlrl_lightning import MADPOModule, PreferenceDataModule
    from comlrl_lightning.generation import VLLMGenerator

    torch.set_num_threads(1)
    module = MADPOModule(agent_model=model, generator=VLLMGenerator(), **DDP_MODEL)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", max_epochs=1, default_root_dir=str(out),
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      check_val_every_n_epoch=None, val_check_interval=1000, logger=False,
                      enable_checkpointing=False, callbacks=[RecordPerRank(out)])
    trainer.fit(module, PreferenceDataModule(**DDP_DATA))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
