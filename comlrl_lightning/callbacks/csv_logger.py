"""A CSV logger that a resumed run continues: the same folder, the same ``metrics.csv``, the same run.

A log folder says which run writes it: ``run.json`` (``{"run_id"}``) beside ``metrics.csv``, written
when a checkpoint records the log. A resume continues a log only when the folder's ``run.json``
names the resumed run (:func:`same_log_folder`): a log folder that was moved away, and another run's
log now under that name, is never continued or cut; the resumed run starts a new version.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Union, cast

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from comlrl_lightning.runtime.files import own_copy, read_bounded, write_atomically

RUN_FILE = "run.json"
"""The file of a log folder naming the run that writes it."""


class ContinuingWriter(ExperimentWriter):
    """Lightning's CSV writer, except that an existing ``metrics.csv`` is kept and appended to.

    Lightning's writer deletes the file it finds when it is made (with a warning); this one is made
    on an empty folder of its own and then pointed at ``log_dir`` (its public ``log_dir`` and
    ``metrics_file_path``, which its writes use), so nothing is deleted. It reads the kept file's
    header, so a metric the resumed run adds widens the header once, and counts its rows
    (:attr:`rows`).
    """

    rows: int = 0

    def __init__(self, log_dir: str) -> None:
        path = Path(log_dir) / self.NAME_METRICS_FILE
        # a planted symbolic link is never read or written through; a hard link gets a copy of its own
        own_copy(path, "the run's metrics log")
        with tempfile.TemporaryDirectory() as empty:  # nothing there for Lightning's writer to delete
            super().__init__(log_dir=empty)
        self.log_dir, self.metrics_file_path = log_dir, str(path)
        os.makedirs(log_dir, exist_ok=True)
        if path.is_file():
            with path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                self.rows = sum(1 for _ in reader)
                self.metrics_keys = list(reader.fieldnames or [])

    def save(self) -> None:
        pending = len(self.metrics)
        super().save()
        self.rows += pending

    def keep_rows_before(self, rows: int, step: int) -> None:
        """Keep the first ``rows`` rows and, of the later ones, those of steps before ``step``."""
        self.save()
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            header, logged = list(reader.fieldnames or []), list(reader)
        kept = logged[:rows] + [row for row in logged[rows:] if _step(row) < step]
        if len(kept) == len(logged):
            return
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=header)
        writer.writeheader()
        writer.writerows(kept)
        write_atomically(path, text.getvalue().encode("utf-8"))
        self.rows, self.metrics_keys = len(kept), header


def _step(row: dict) -> float:
    try:
        return float(row.get("step") or 0)
    except ValueError:
        return 0.0


class ResumableCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger``, continued by a resumed run (the CLI's default logger).

    A run resumed with the same ``save_dir`` and ``name`` logs into the version folder of the run it
    resumes (the seed API and the CLI pass the checkpoint's ``version``) and appends to its
    ``metrics.csv``, so the curves and the reward-curve plot cover the whole run. Rows the interrupted
    run logged after the checkpoint are dropped when the resumed run starts (it logs them again),
    so every step appears once: a :class:`~comlrl_lightning.callbacks.CheckpointRecord` flushes the
    log at every checkpoint and keeps its row count in the checkpoint.

    Args:
        save_dir: where the ``name/version_N`` folders go (``None``: the working directory; the CLI
            fills in ``trainer.default_root_dir``).
        name: the experiment folder (``lightning_logs``).
        version: the version folder (``None``: the next free ``version_N``).
        prefix: put at the start of every metric key.
        flush_logs_every_n_steps: how often rows are written to the file.
    """

    def __init__(
        self,
        save_dir: Optional[str] = None,
        name: Optional[str] = "lightning_logs",
        version: Optional[Union[int, str]] = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        super().__init__(
            save_dir=save_dir if save_dir is not None else os.getcwd(),
            name=name,
            version=version,
            prefix=prefix,
            flush_logs_every_n_steps=flush_logs_every_n_steps,
        )

    @property
    @rank_zero_experiment
    def experiment(self) -> ContinuingWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ContinuingWriter(log_dir=self.log_dir)
        return cast(ContinuingWriter, self._experiment)  # only this property creates it

    @property
    def rows_logged(self) -> int:
        """Rows in ``metrics.csv`` once the pending ones are written (call :meth:`save` first)."""
        return self.experiment.rows

    @rank_zero_only
    def keep_rows_before(self, rows: int, step: int) -> None:
        """Drop what an interrupted run logged after its checkpoint: keep the first ``rows`` rows and,
        of the later ones, only those of steps before ``step`` (the checkpoint's ``global_step``)."""
        self.experiment.keep_rows_before(rows, step)

    @rank_zero_only
    def claim(self, run_id: str) -> None:
        """Write ``run.json`` naming ``run_id`` in the log folder (unless it already does)."""
        if logged_run(self.log_dir) != run_id:
            write_atomically(Path(self.log_dir) / RUN_FILE, json.dumps({"run_id": run_id}).encode())


def logged_run(log_dir: Any) -> Optional[str]:
    """The run id the ``run.json`` of ``log_dir`` names (``None``: none, or not one of this layout)."""
    try:
        record = json.loads(read_bounded(Path(log_dir) / RUN_FILE, 4096, "a log folder's run record"))
    except (OSError, ValueError):
        return None
    run_id = record.get("run_id") if isinstance(record, dict) else None
    return run_id if isinstance(run_id, str) else None


def log_folder(save_dir: Any, name: Optional[str], version: Any) -> Path:
    """The version folder of a CSV log (as Lightning names it: ``version_N`` for an integer)."""
    return Path(save_dir) / (name or "") / (f"version_{version}" if isinstance(version, int) else str(version))


def same_log_folder(save_dir: Any, name: Optional[str], logs: Optional[Dict[str, Any]]) -> bool:
    """Whether a CSV log in ``save_dir/name`` is the one a checkpoint's log record ``logs`` names (its
    version folder is then the record's ``version``): the same folder, and, when the record names
    its run, a version folder whose ``run.json`` names that run."""
    if not logs or save_dir is None:
        return False
    if str(Path(save_dir).absolute()) != logs.get("save_dir") or name != logs.get("name"):
        return False
    run_id = logs.get("run_id")
    return run_id is None or logged_run(log_folder(save_dir, name, logs.get("version"))) == run_id


__all__ = ["RUN_FILE", "ResumableCSVLogger", "log_folder", "logged_run", "same_log_folder"]
