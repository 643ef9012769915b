"""Use comlrl-lightning's pieces inside your own Lightning project, and its loss in plain PyTorch.

    python examples/embed_in_your_project.py /tmp/embed-demo

Part 1 puts ``MADPOModule`` and ``PreferenceDataModule`` into *your* ``Trainer`` with your own
callback and logger. Part 2 uses ``madpo_loss`` in a hand-written PyTorch loop over a Team.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import CSVLogger

from comlrl_lightning import (
    GenerationSettings,
    MADPOModule,
    PreferenceDataModule,
    TaskOptions,
    Team,
    TeamOptions,
    madpo_loss,
)
from comlrl_lightning.team.team import pack_sequences


def joint_reward(writer, matcher, batch_items=None):
    """Your task reward: agent 0 should write 'a's, agent 1 as many characters as agent 0."""
    w, m = writer[0], matcher[0]
    return [w.count("a") / max(len(w), 1) - abs(len(w) - len(m)) / max(len(w), len(m), 1)]


class CountUpdates(Callback):
    """Your own callback: it sees an ordinary LightningModule."""

    def __init__(self) -> None:
        self.updates = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.updates += 1


def lightning_part(root: Path) -> dict:
    items = [{"prompt": word} for word in ("cat", "dog", "sun", "sea", "sky", "map", "pen", "cup")]
    module = MADPOModule(
        team=TeamOptions(agent_model="embedded", num_agents=2),
        dpo_beta=0.1,
        agent_learning_rate=3e-3,
        sampling=GenerationSettings(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None),
    )
    task = TaskOptions(
        train_dataset=items,
        eval_dataset=items[:4],
        formatters=["write about {prompt}:", "answer about {prompt}:"],
        reward_func=joint_reward,
    )
    data = PreferenceDataModule(
        task=task,
        preference_num_candidates=6,
        preference_pairs_per_sample=4,
        train_batch_size=8,
        num_train_epochs=2,
        eval_num_samples=4,
        eval_batch_size=4,
    )
    counter = CountUpdates()
    trainer = Trainer(
        max_epochs=2,
        accelerator="cpu",
        callbacks=[counter],
        logger=CSVLogger(root, name="mine"),
        enable_progress_bar=False,
        check_val_every_n_epoch=None,  # val_check_interval counts updates across epochs
        val_check_interval=2,
        log_every_n_steps=1,
    )
    trainer.fit(module, data)
    return {
        "updates": counter.updates,
        "global_step": trainer.global_step,
        "pairs": len(data.pairs),
        "metrics": Path(trainer.logger.log_dir) / "metrics.csv",
    }


def plain_pytorch_part(steps: int = 3) -> list:
    """``madpo_loss`` on margins computed by a Team, in a loop with no Lightning at all."""
    team = Team(["embedded", "embedded"])
    optimizer = torch.optim.AdamW(team.parameters(), lr=1e-3)
    prompt, winner, loser = [3, 4, 5], [6, 7, 8], [9, 10]
    losses = []
    for _ in range(steps):
        margins = []
        for agent in range(team.num_agents):
            batch = pack_sequences([prompt, prompt], [winner, loser], [3, 2], team.tokenizers[agent].pad_token_id)
            logprobs = team.score([batch], unit="sequence", agents=[agent])[0]
            margins.append(logprobs[:1] - logprobs[1:])
        loss = madpo_loss(torch.stack(margins, dim=-1), beta=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/embed")
    print("lightning part:", lightning_part(root))
    print("plain PyTorch losses:", plain_pytorch_part())
