"""The callback that carries a data module's state in and out of checkpoints, with the files it names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from lightning.pytorch import Callback

from comlrl_lightning.runtime.checkpoint_assets import ASSETS_KEY

if TYPE_CHECKING:
    from comlrl_lightning.datamodules.preference import TaskDataModule


class DataStateCallback(Callback):
    """Checkpoints a data module's state under one fixed key, whatever the data module's class is called.

    Lightning files a data module's ``state_dict()`` under its class name and silently skips it
    when the name differs, so a renamed or subclassed data module would quietly recollect pairs
    and restart its replay history. A callback's state is filed under its ``state_key`` instead:
    the data module registers this one in ``setup`` (before Lightning restores a checkpoint) and
    it carries :meth:`TaskDataModule.data_state_dict` in and out. Nothing else reads or rewrites it.
    It also hands the checkpoint the files that state names (:meth:`TaskDataModule.checkpoint_assets`),
    which the checkpoint IO keeps beside the checkpoint.
    """

    state_key = "comlrl_lightning.data"

    def __init__(self, datamodule: "TaskDataModule") -> None:
        self.datamodule = datamodule

    def state_dict(self) -> Dict[str, Any]:
        return self.datamodule.data_state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.datamodule.load_data_state_dict(state_dict)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: Dict[str, Any]) -> None:
        assets = self.datamodule.checkpoint_assets()
        if assets:
            checkpoint.setdefault(ASSETS_KEY, []).extend(assets)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.datamodule.release_folders()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.datamodule.release_folders()


__all__ = ["DataStateCallback"]
