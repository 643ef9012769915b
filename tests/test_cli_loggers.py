"""The command line's loggers: a logger chosen without a ``save_dir`` writes under
``trainer.default_root_dir`` (TensorBoardLogger too, whose class requires one), and a W&B run keeps
its checkpoints, ``config.yaml``, plots and a ``metrics.csv`` together in one version folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from jsonargparse import Namespace

from comlrl_lightning.cli import CSV_LOGGER, ROOT_DIR, main, run_cli, with_csv_log
from tests.helpers.cli_helpers import TWO_UPDATES as TINY

CONFIG = str(Path(__file__).parents[1] / "configs" / "madpo.yaml")
WANDB = "lightning.pytorch.loggers.WandbLogger"
TENSORBOARD = "lightning.pytorch.loggers.TensorBoardLogger"


def _section(class_path: str, **init_args) -> Namespace:
    return Namespace(class_path=class_path, init_args=Namespace(**init_args))


def test_wandb_alone_gets_a_csv_log_first_and_other_choices_are_kept():
    wandb = _section(WANDB, save_dir=ROOT_DIR, offline=True)
    added = with_csv_log(wandb)
    assert [section["class_path"] for section in added] == [CSV_LOGGER, WANDB]
    assert added[0]["init_args"]["save_dir"] == ROOT_DIR and added[0]["init_args"]["name"] == "lightning_logs"
    assert added[0]["init_args"]["version"] is None
    with_lightning_csv = [wandb, _section("lightning.pytorch.loggers.CSVLogger", save_dir="logs")]
    for kept in (with_lightning_csv, [_section(CSV_LOGGER), wandb], _section(TENSORBOARD), None, True, False):
        assert with_csv_log(kept) is kept


@pytest.mark.slow  # seconds: parses the shipped config through the whole command line
def test_a_tensorboard_logger_chosen_without_a_save_dir_parses_with_the_root_folder_to_come(capsys):
    """Parsed only (tensorboard need not be installed): its class requires a save_dir, and the
    default logger's carries over instead of the parse failing on a missing one."""
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", CONFIG, "--trainer.logger", TENSORBOARD, "--print_config"])
    assert exit_info.value.code == 0
    logger = yaml.safe_load(capsys.readouterr().out)["trainer"]["logger"]
    assert logger["class_path"] == TENSORBOARD and logger["init_args"]["save_dir"] == ROOT_DIR


@pytest.mark.slow  # trains a team from the command line
def test_tensorboard_with_only_default_root_dir_writes_its_events_beside_the_checkpoints(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install comlrl-lightning[tensorboard]")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    root = tmp_path / "root"
    run_cli(
        [
            "fit",
            "--config",
            CONFIG,
            "--trainer.default_root_dir",
            str(root),
            *TINY,
            "--trainer.logger",
            "TensorBoardLogger",
        ]
    )
    version = root / "lightning_logs" / "version_0"
    assert list(version.glob("events.out.tfevents.*")) and (version / "checkpoints" / "last.ckpt").is_file()
    assert (version / "config.yaml").is_file() and (version / "reward_curve.png").is_file()
    assert not list((tmp_path / "cwd").iterdir())


@pytest.mark.slow  # wandb starts its service process, and the team trains
def test_a_wandb_run_keeps_checkpoints_config_plots_and_metrics_in_one_version_folder(tmp_path, monkeypatch):
    import wandb

    wandb.finish()  # a run an earlier test left open in this process would be reused by the logger
    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    root = tmp_path / "root"
    logger = ["--trainer.logger", WANDB, "--trainer.logger.init_args.offline", "true"]
    cli = run_cli(["fit", "--config", CONFIG, "--trainer.default_root_dir", str(root), *TINY, *logger])
    wandb.finish()
    run_id = cli.trainer.loggers[1].version
    version = root / "lightning_logs" / "version_0"
    assert sorted(os.listdir(root)) == ["lightning_logs", "wandb"]  # no folder named after the W&B run id
    for name in ("checkpoints/last.ckpt", "config.yaml", "metrics.csv", "reward_curve.png"):
        assert (version / name).is_file(), name
    rows = (version / "metrics.csv").read_text().splitlines()
    assert "eval/turn_1/reward_mean" in rows[0] and len(rows) > 2
    assert list(root.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert not list((tmp_path / "cwd").iterdir())
