"""The ``comlrl-lightning`` command: a LightningCLI over the modules and data modules.

``comlrl-lightning fit --config configs/madpo.yaml``. The model and data sections take a
``class_path`` (``comlrl_lightning.MADPOModule``, ``comlrl_lightning.PreferenceDataModule``...) so one
command runs every algorithm. ``trainer.max_epochs`` is ``num_train_epochs x num_iterations`` of the data section, and the model's
``num_agents`` is shared with the data module.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_info

from comlrl_lightning.options import OptionError
from comlrl_lightning.runtime.checkpoint_io import is_remote


def total_epochs(data_options) -> int:
    """``num_train_epochs`` per round times ``num_iterations`` rounds (1 for the base data module)."""
    return data_options.num_train_epochs * getattr(data_options, "num_iterations", 1)


class PreferenceCLI(LightningCLI):
    """LightningCLI with the links between the model, data and trainer sections."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.init_args", "trainer.max_epochs", compute_fn=total_epochs)
        parser.link_arguments("model.init_args.num_agents", "data.init_args.num_agents")
        # Logs, checkpoints and plots stay together under trainer.default_root_dir, as with
        # Lightning's own default logger: a logger's save_dir follows it (loggers without one are left alone).
        parser.link_arguments("trainer.default_root_dir", "trainer.logger.init_args.save_dir")
        # A CSV logger unless the config names one: Lightning's default (logger: true) would print
        # a notice about TensorBoard not being installed.
        parser.set_defaults(
            {"trainer.logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "."}}}
        )

    def _parse_ckpt_path(self) -> None:
        """Resuming keeps the options of this command line and config, and says what changed.

        LightningCLI would overwrite them silently with the hyperparameters saved in the checkpoint
        (``--model.init_args.dpo_beta 7`` would train on with 0.1). Here the given options win and
        every model option that differs from the checkpoint's is printed with both values. A remote
        checkpoint (a URL) is refused: Lightning would load it with ``weights_only=False``, i.e. run
        code from the network.
        """
        if not self.config.get("subcommand"):
            return
        ckpt_path = self.config[self.config.subcommand].get("ckpt_path")
        if not ckpt_path:
            return
        if is_remote(str(ckpt_path)):
            print(
                f"error: ckpt_path {ckpt_path!r} is remote; download it and pass a local file "
                "(a checkpoint is loaded with weights_only=False, which runs code from it).",
                file=sys.stderr,
            )
            raise SystemExit(2)
        if Path(ckpt_path).is_file():
            saved = torch.load(ckpt_path, weights_only=True, map_location="cpu").get("hyper_parameters", {})
            given = self.config[self.config.subcommand].get("model", {}).get("init_args", {})
            for name, value in sorted(saved.items()):
                if name in given and given[name] != value and not name.startswith("_"):
                    rank_zero_info(
                        f"resuming with model option {name} = {given[name]!r} (the checkpoint was "
                        f"trained with {value!r}); the given options win."
                    )

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
    """The console script: run the command line (``args``: the words after the program name).

    Returns nothing: a console script's return value becomes the process's exit status.
    """
    run_cli(args)


def run_cli(args: Optional[List[str]] = None) -> PreferenceCLI:
    """Run the command line and return the CLI object (its ``model``, ``datamodule`` and ``trainer``)."""
    return PreferenceCLI(
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
