"""The ``comlrl-lightning`` command: a LightningCLI over the modules and data modules.

``comlrl-lightning fit --config configs/madpo.yaml``. The model and data sections take a
``class_path`` (``comlrl_lightning.MADPOModule``, ``comlrl_lightning.PreferenceDataModule``...) so one
command runs every algorithm. ``trainer.max_epochs`` is ``num_train_epochs x num_iterations`` of the data section, and the model's
``num_agents`` is shared with the data module.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI

from .options import OptionError


def total_epochs(data_options) -> int:
    """``num_train_epochs`` per round times ``num_iterations`` rounds (1 for the base data module)."""
    return data_options.num_train_epochs * getattr(data_options, "num_iterations", 1)


class PreferenceCLI(LightningCLI):
    """LightningCLI with the links between the model, data and trainer sections."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.init_args", "trainer.max_epochs", compute_fn=total_epochs)
        parser.link_arguments("model.init_args.num_agents", "data.init_args.num_agents")

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except Exception as error:  # surface our option errors as one clear line, like a parse error
            cause: Optional[BaseException] = error
            while cause is not None and not isinstance(cause, OptionError):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
            print(f"error: {cause}", file=sys.stderr)
            raise SystemExit(2) from None


def main(args: Optional[List[str]] = None) -> None:
    PreferenceCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        auto_configure_optimizers=False,  # the modules take optimizer / lr_scheduler classes themselves
        save_config_kwargs={"overwrite": True},
        args=args,
    )


if __name__ == "__main__":
    main()
