"""ResumableCSVLogger (csv_logger.py): an existing log kept and its header widened, rows dropped back to a
checkpoint's, no log read or written through a link, and a log folder continued only for its own run."""

from __future__ import annotations

import pytest

from comlrl_lightning.callbacks import ResumableCSVLogger
from tests.callbacks.test_checkpoints import run


def test_the_csv_logger_keeps_an_existing_log_and_widens_its_header(tmp_path):
    logger = ResumableCSVLogger(save_dir=str(tmp_path), version=0)
    logger.log_metrics({"a": 1.0}, step=0)
    logger.save()
    again = ResumableCSVLogger(save_dir=str(tmp_path), version=0)
    assert again.rows_logged == 1
    again.log_metrics({"b": 2.0}, step=1)
    again.save()
    text = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert text == ["a,b,step", "1.0,,0", ",2.0,1"] and again.rows_logged == 2
    again.log_metrics({"a": 3.0}, step=1)
    again.log_metrics({"a": 4.0}, step=2)
    again.save()
    again.keep_rows_before(rows=1, step=2)  # the first row, then only rows of steps before 2
    text = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert text == ["a,b,step", "1.0,,0", ",2.0,1", "3.0,,1"] and again.rows_logged == 3
    assert ResumableCSVLogger(save_dir=None).save_dir  # no save_dir: the working directory


def test_the_csv_logger_never_reads_or_writes_a_log_through_a_link(tmp_path):
    from comlrl_lightning.errors import RunStateError

    victim = tmp_path / "victim.csv"
    victim.write_text("a,step\n1,0\n")
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)
    (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").symlink_to(victim)
    with pytest.raises(RunStateError, match=r"metrics\.csv \(the run's metrics log\) is a symbolic link"):
        ResumableCSVLogger(save_dir=str(tmp_path), version=0).experiment
    assert victim.read_text() == "a,step\n1,0\n"


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_log_files_that_are_hard_links_are_rewritten_without_writing_the_other_name(tmp_path):
    import os

    log = tmp_path / "lightning_logs" / "version_0"
    log.mkdir(parents=True)
    outside = {name: tmp_path / f"outside-{name}" for name in ("metrics.csv", "hparams.yaml")}
    outside["metrics.csv"].write_text("a,step\n1.0,0\n")
    outside["hparams.yaml"].write_text("mine: 1\n")
    for name, path in outside.items():
        os.link(path, log / name)  # another name of a file outside the run
    run(tmp_path, max_epochs=1)  # a real run logs, writes hparams.yaml and appends to metrics.csv
    assert outside["metrics.csv"].read_text() == "a,step\n1.0,0\n"  # the other names keep their bytes
    assert outside["hparams.yaml"].read_text() == "mine: 1\n"
    assert (log / "metrics.csv").read_text().startswith("a,") and len((log / "metrics.csv").read_text()) > 20
    assert (log / "hparams.yaml").read_text() != "mine: 1\n"


def test_a_log_folder_continues_only_for_the_run_its_run_file_names(tmp_path):
    from comlrl_lightning.callbacks.csv_logger import logged_run, same_log_folder

    logger = ResumableCSVLogger(save_dir=str(tmp_path), version=0)
    logger.claim("a" * 32)
    assert logged_run(tmp_path / "lightning_logs" / "version_0") == "a" * 32
    logs = {"save_dir": str(tmp_path.absolute()), "name": "lightning_logs", "version": 0, "rows": 1}
    assert same_log_folder(tmp_path, "lightning_logs", dict(logs, run_id="a" * 32))
    assert not same_log_folder(tmp_path, "lightning_logs", dict(logs, run_id="b" * 32))  # another run's log now
    assert not same_log_folder(tmp_path, "lightning_logs", dict(logs, run_id="a" * 32, version=1))  # no run file
    assert same_log_folder(tmp_path, "lightning_logs", logs)  # a record of an earlier version: by folder only
