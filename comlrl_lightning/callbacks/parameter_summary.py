"""A one-line parameter summary when fitting starts (in place of Lightning's model summary table)."""

from __future__ import annotations

from typing import Tuple

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.model_summary import get_human_readable_count


def parameter_counts(module: LightningModule) -> Tuple[int, int, int]:
    """``(total, trainable, bytes)`` over ``module.parameters()``: ``sum(numel)``, the same over
    parameters with ``requires_grad``, and ``sum(numel * element_size)``."""
    parameters = list(module.parameters())
    total = sum(p.numel() for p in parameters)
    trainable = sum(p.numel() for p in parameters if p.requires_grad)
    return total, trainable, sum(p.numel() * p.element_size() for p in parameters)


class ParameterSummary(Callback):
    """Prints one line when fitting starts: the module's parameters, how many train, their size.

    Meant in place of Lightning's model summary table (``enable_model_summary: false``), whose rows
    (metric containers, the whole team as one module) and FLOPs column (0 without an example
    input) say little about a team of agents.
    """

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        total, trainable, size = parameter_counts(pl_module)
        rank_zero_info(
            f"{type(pl_module).__name__}: {get_human_readable_count(total)} parameters, "
            f"{get_human_readable_count(trainable)} trainable, {size / 1e6:.1f} MB"
        )
