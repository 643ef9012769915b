"""What rounds need of the Trainer running them, checked before any model loads (never set on it)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningDataModule, Trainer

from comlrl_lightning.contracts import data_module_checks
from comlrl_lightning.errors import ConfigurationError


def reloads_every_epoch(trainer: Any) -> bool:
    """Whether ``trainer`` asks for the training loader at every epoch."""
    return trainer.reload_dataloaders_every_n_epochs == 1


def check_round_trainer(trainer: Trainer, data_module: LightningDataModule) -> None:
    """``trainer`` can run rounds of ``data_module``: the callbacks that observe rounds check it (they read
    each round when its epoch starts, so the Trainer must reload its loaders every epoch), and no fraction
    of an epoch sets when to validate (a round's size is known only once it is collected)."""
    observers = data_module_checks(trainer.callbacks)  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
    if observers and not reloads_every_epoch(trainer):
        raise ConfigurationError(
            f"{type(observers[0]).__name__} reads each round when its epoch starts, which needs "
            "Trainer(reload_dataloaders_every_n_epochs=1) (the command line and the seed API set it)."
        )
    for callback in observers:
        callback.check_data_module(data_module)
    fraction = getattr(trainer, "val_check_interval", None)  # absent when it is a time
    if isinstance(fraction, float) and fraction != 1.0:
        raise ConfigurationError(
            f"trainer.val_check_interval: a fraction of an epoch ({fraction}) does not apply to rounds, whose "
            "size is known only once collected (a round may have no pairs); give a number of updates (an int), "
            "1.0 or a time."
        )
