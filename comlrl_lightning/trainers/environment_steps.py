"""The reference (CoMLRL)'s environment-step counter, kept beside Lightning's ``global_step``.

The reference logs its W&B metrics at ``env_step``, which counts environment interactions, not
optimizer updates: MADPO adds ``environment_steps_per_pair`` for every pair an update trains on
(when ``use_environment_step``), MARLHF's policy phase adds ``num_generations`` for every task item
it samples. :class:`EnvironmentSteps` counts the same way after each training batch, is saved in
checkpoints (a resumed run goes on counting), and is what the seed API's ``trainer.env_step`` reads
and its W&B metrics are stepped by.
"""

from __future__ import annotations

from typing import Any, Dict

from lightning.pytorch import Callback, LightningModule, Trainer


def batch_env_steps(batch: Any, per_pair: int, per_item: int) -> int:
    """Environment steps of one training batch: ``per_pair * pairs`` for a batch of preference pairs
    (a dict with ``candidate_reward_mean``, one entry per pair), ``per_item * items`` for a list of task items."""
    if isinstance(batch, dict):
        return per_pair * int(batch["candidate_reward_mean"].shape[0])
    return per_item * len([item for item in batch if item is not None])


class EnvironmentSteps(Callback):
    """Counts the reference's ``env_step`` (see the module docstring).

    Args:
        per_pair: steps per trained preference pair (MADPO: ``environment_steps_per_pair``, or 0
            when ``use_environment_step`` is off).
        per_item: steps per task item of a policy update (MARLHF: ``num_generations``).
    """

    def __init__(self, per_pair: int, per_item: int) -> None:
        self.per_pair, self.per_item = per_pair, per_item
        self.env_step = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.env_step += batch_env_steps(batch, self.per_pair, self.per_item)

    def state_dict(self) -> Dict[str, Any]:
        return {"env_step": self.env_step}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.env_step = int(state_dict.get("env_step", 0))


def environment_steps_for(args: Any) -> EnvironmentSteps:
    """The counter a config implies: MADPO's per pair, MARLHF's per sampled item."""
    per_pair = args.environment_steps_per_pair if args.use_environment_step else 0
    return EnvironmentSteps(per_pair=per_pair, per_item=getattr(args, "num_generations", 0))


__all__ = ["EnvironmentSteps", "batch_env_steps", "environment_steps_for"]
