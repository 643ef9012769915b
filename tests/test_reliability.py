"""Resumes with changed options or another kind of data module (the resume rule of
``comlrl_lightning/checkpoints/resume_rule.py``); the file's other fault tests moved to the files of the
modules they test (data/test_snapshots, runtime/test_paths, runtime/test_folder_lock, ...)."""

from __future__ import annotations

import logging

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from comlrl_lightning import MADPOModule, PreferenceDataModule
from comlrl_lightning.cli import main, run_cli
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_trainer
from tests.helpers.cli_helpers import TINY_CLI
from tests.helpers.iterative_run import make_run


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_resuming_keeps_the_given_options_and_says_what_changed(tmp_path, caplog):
    common = ["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path), *TINY_CLI]
    main(common + ["--data.init_args.num_train_epochs", "1"])
    (last,) = tmp_path.glob("lightning_logs/version_0/checkpoints/last.ckpt")
    with caplog.at_level(logging.INFO):
        cli = run_cli(
            common
            + ["--data.init_args.num_train_epochs", "2", "--model.init_args.dpo_beta", "7", "--ckpt_path", str(last)]
        )
    assert cli.model.dpo_beta == 7.0  # the command line wins over the checkpoint's 0.1
    lines = [m for m in caplog.messages if m.startswith("resumed with changed options: ")]
    assert lines == ["resumed with changed options: model.dpo_beta: 0.1 -> 7.0, data.num_train_epochs: 1 -> 2"]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_base_checkpoint_cannot_resume_an_iterative_data_module(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tiny_trainer(tmp_path, max_epochs=1, callbacks=[checkpoint]).fit(
        MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA)
    )
    module, datamodule, trainer = make_run(tmp_path / "iterative")
    # refused when the checkpoint is loaded, before any round: the resume rule names both kinds
    with pytest.raises(ValueError, match="with other data.kind \\(data.kind: 'preference' -> 'iterative'"):
        trainer.fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))


# ---------------------------------------------------------------------------------------------
# Bad data: found when it is loaded, before any model work, with the file, line, item and field


# ---------------------------------------------------------------------------------------------
# Checkpoints on a full disk


# ---------------------------------------------------------------------------------------------
# Round three: every path confined, local sources only, files never followed, one error family
