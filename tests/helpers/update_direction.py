"""What the update-direction tests share: one update through Lightning's loop on a fixed batch, and
log-probs computed directly (one unpadded forward, a plain log-softmax), so that the measure of the
objective never runs the library code a mutation may have broken."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from torch.utils.data import DataLoader

from comlrl_lightning import MAGRPOModule


def direct_logprob(agent, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> torch.Tensor:
    """``log pi(completion | prompt)`` summed over the completion's tokens, from one unpadded forward."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    logprobs = torch.log_softmax(agent(input_ids=ids).logits[0, :-1].float(), dim=-1)
    picked = logprobs[torch.arange(ids.shape[1] - 1), ids[0, 1:]]
    return picked[len(prompt_ids) - 1 :].sum()


@torch.no_grad()
def rollout_logprobs(team, prompts: List[List[str]], samples) -> torch.Tensor:
    """``[N, items, G]``: every agent's log-prob of each of its completions ``samples[agent][item][g]``
    after its prompt ``prompts[item][agent]`` (tokenized with the special tokens, as the agents' prompts are)."""
    return torch.stack(
        [
            torch.stack(
                [
                    torch.stack(
                        [
                            direct_logprob(
                                team.agents[agent],
                                team.tokenizers[agent](prompts[item][agent], add_special_tokens=True)["input_ids"],
                                completion.ids,
                            )
                            for completion in row
                        ]
                    )
                    for item, row in enumerate(samples[agent])
                ]
            )
            for agent in range(team.num_agents)
        ]
    )


def one_update(
    module: LightningModule,
    root,
    datamodule: Optional[LightningDataModule] = None,
    batch: Any = None,
    **trainer_options: Any,
) -> None:
    """One training step of ``module`` (its ``training_step``, backward and optimizer step) on the first
    batch of ``datamodule``, or on ``batch`` served as is; ``trainer_options`` (``precision``,
    ``callbacks``) go to the Trainer."""
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
        **trainer_options,
    )
    if datamodule is not None:
        trainer.fit(module, datamodule)
    else:
        trainer.fit(module, train_dataloaders=DataLoader([batch], batch_size=None))
    assert trainer.global_step == 1


class FixedReturnsModule(MAGRPOModule):
    """A policy-gradient module whose joint returns are :attr:`fixed_returns` (``[items, G]``; the hook
    MARLHF overrides with its reward model), and which keeps the prompts and rollouts of its update."""

    fixed_returns: torch.Tensor
    rollouts: Any = None

    def joint_returns(self, items, prompts, texts) -> torch.Tensor:
        return self.fixed_returns.to(self.device)

    def sample_rollouts(self, items, prompts):
        samples = super().sample_rollouts(items, prompts)
        self.rollouts = (prompts, samples)
        return samples
