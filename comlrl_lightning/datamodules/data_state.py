"""The callback that carries a data module's state in and out of checkpoints, with the files it names."""

from __future__ import annotations

from typing import Any, Dict

from lightning.pytorch import Callback

from comlrl_lightning.checkpoints.assets import ASSETS_KEY
from comlrl_lightning.contracts import DataState
from comlrl_lightning.errors import ComlrlError, DataError


class DataStateCallback(Callback):
    """Checkpoints a data module's state under one fixed key, whatever the data module's class is called.

    Lightning files a data module's ``state_dict()`` under its class name and silently skips it
    when the name differs, so a renamed or subclassed data module would quietly recollect pairs
    and restart its replay history. A callback's state is filed under its ``state_key`` instead:
    the data module offers this one (``trainer_callbacks``), the team module hands it to Lightning
    (``configure_callbacks``, before Lightning restores a checkpoint), and it carries
    :meth:`TaskDataModule.data_state_dict` in and out (the
    :class:`~comlrl_lightning.contracts.DataState` contract). Nothing else reads or rewrites it. It also hands the checkpoint the files that state names (:meth:`TaskDataModule.checkpoint_assets`),
    which the checkpoint IO keeps beside the checkpoint.
    """

    state_key = "comlrl_lightning.data"

    def __init__(self, datamodule: DataState) -> None:
        self.datamodule = datamodule

    def state_dict(self) -> Dict[str, Any]:
        return self.datamodule.data_state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore the data module's state; a state with a field missing or of the wrong kind (a
        corrupt checkpoint, or one of a newer version) is a :class:`~comlrl_lightning.errors.DataError`
        naming the file and the field, never a bare ``KeyError`` or ``TypeError``."""
        trainer = self.datamodule.trainer
        path = (trainer.ckpt_path if trainer is not None else None) or "the checkpoint"
        if not isinstance(state_dict, dict) or state_dict.get("version") != 1:
            version = state_dict.get("version") if isinstance(state_dict, dict) else None
            raise DataError(f"{path}: data state ({self.state_key}) of an unknown format (version {version!r}).")
        try:
            self.datamodule.load_data_state_dict(state_dict)
        except ComlrlError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            what = f"field {error.args[0]!r} missing" if isinstance(error, KeyError) and error.args else str(error)
            raise DataError(
                f"{path}: the data state ({self.state_key}) is corrupt or of a newer version ({what[:200]})."
            ) from None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: Dict[str, Any]) -> None:
        assets = self.datamodule.checkpoint_assets()
        if assets:
            checkpoint.setdefault(ASSETS_KEY, []).extend(assets)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.datamodule.release_folders()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.datamodule.release_folders()


__all__ = ["DataStateCallback"]
