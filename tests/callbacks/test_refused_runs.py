"""A refused run's empty log folder goes; anything that holds more stays as it is."""

from __future__ import annotations

import os

from comlrl_lightning.callbacks.refused_runs import holds_only_start_files, remove_unused_log_folder


def test_only_a_folder_of_what_a_run_writes_at_its_start_is_removed(tmp_path):
    empty, started, used = tmp_path / "version_0", tmp_path / "version_1", tmp_path / "version_2"
    for folder in (empty, started, used):
        folder.mkdir()
    (started / "config.yaml").write_text("a: 1\n")
    (started / "hparams.yaml").write_text("b: 2\n")
    (used / "config.yaml").write_text("a: 1\n")
    (used / "metrics.csv").write_text("step\n0\n")
    assert remove_unused_log_folder(empty) and not empty.exists()
    assert remove_unused_log_folder(started) and not started.exists()
    assert not remove_unused_log_folder(used)
    assert sorted(os.listdir(used)) == ["config.yaml", "metrics.csv"]  # untouched
    assert not remove_unused_log_folder(tmp_path / "absent")


def test_a_link_or_a_folder_under_a_start_files_name_keeps_the_folder(tmp_path):
    linked, nested = tmp_path / "version_0", tmp_path / "version_1"
    linked.mkdir()
    nested.mkdir()
    (tmp_path / "elsewhere.yaml").write_text("keep\n")
    os.symlink(tmp_path / "elsewhere.yaml", linked / "config.yaml")
    (nested / "hparams.yaml").mkdir()
    assert not remove_unused_log_folder(linked) and not remove_unused_log_folder(nested)
    assert (tmp_path / "elsewhere.yaml").read_text() == "keep\n"
    os.symlink(nested, tmp_path / "version_2")
    assert not remove_unused_log_folder(tmp_path / "version_2")  # a link to a folder is never followed


def test_the_start_files_are_config_and_hparams():
    assert holds_only_start_files([]) and holds_only_start_files(["config.yaml", "hparams.yaml"])
    assert not holds_only_start_files(["config.yaml", "metrics.csv"])


def test_a_trainer_refused_while_the_data_is_read_leaves_no_version_folder(tmp_path):
    from lightning.pytorch import Trainer
    from lightning.pytorch.loggers import CSVLogger

    from comlrl_lightning import MADPOModule, PreferenceDataModule, TaskOptions, TeamOptions
    from comlrl_lightning.callbacks.refused_runs import RefusedRunLogs
    from comlrl_lightning.errors import ComlrlError

    data = PreferenceDataModule(task=TaskOptions(train_dataset=str(tmp_path / "missing.jsonl")))
    logger = CSVLogger(str(tmp_path / "logs"))
    trainer = Trainer(logger=logger, callbacks=[RefusedRunLogs()], enable_progress_bar=False, max_epochs=1)
    try:
        trainer.fit(MADPOModule(team=TeamOptions(agent_model="embedded")), data)
    except ComlrlError:
        pass
    else:
        raise AssertionError("the missing dataset was not refused")
    assert not (tmp_path / "logs" / "lightning_logs" / "version_0").exists()
