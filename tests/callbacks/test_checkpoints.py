"""CheckpointRecord, ResumableCheckpoint and ResumableCSVLogger on real tiny runs: the record, the
continued log, last.ckpt as the newest state, and Lightning's warnings only where they help (the logger's
own tests: test_csv_logger.py)."""

from __future__ import annotations

import warnings

import pytest
import torch

from comlrl_lightning import MADPOModule, PreferenceDataModule
from comlrl_lightning.callbacks import CheckpointRecord, ResumableCheckpoint, ResumableCSVLogger
from comlrl_lightning.checkpoints.metadata import read_checkpoint_metadata
from comlrl_lightning.runtime.quiet import install_noise_filters
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_trainer


def run(tmp_path, ckpt_path=None, checkpoint=None, **trainer):
    """A tiny MADPO run logging to a ResumableCSVLogger (flushed every step) in ``tmp_path``."""
    logger = ResumableCSVLogger(save_dir=str(tmp_path), version=0, flush_logs_every_n_steps=1)
    checkpoint = checkpoint or ResumableCheckpoint(
        dirpath=tmp_path / "ckpt", save_top_k=-1, save_last=True, save_on_train_epoch_end=True
    )
    options = dict(logger=logger, callbacks=[CheckpointRecord(), checkpoint], enable_checkpointing=True)
    fit = tiny_trainer(tmp_path, **{**options, **trainer})
    module = MADPOModule(**TINY_MODEL)
    fit.fit(module, PreferenceDataModule(**TINY_DATA), ckpt_path=ckpt_path)
    return fit, module


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_resumed_run_continues_the_csv_log_and_it_equals_an_uninterrupted_runs(tmp_path):
    whole, _ = run(tmp_path / "whole")
    expected = (tmp_path / "whole" / "lightning_logs" / "version_0" / "metrics.csv").read_bytes()
    part, _ = run(tmp_path / "part")  # the whole run, then a resume from its first epoch's checkpoint
    first_epoch = tmp_path / "part" / "ckpt" / "epoch=0-step=8.ckpt"
    record = read_checkpoint_metadata(first_epoch)
    assert record["logs"]["version"] == 0 and 0 < record["logs"]["rows"]
    assert record["trainer_class"] == "MADPOModule" and len(record["run_id"]) == 32
    resumed, _ = run(tmp_path / "part", ckpt_path=str(first_epoch))
    # the rows logged after that checkpoint were dropped and logged again: every step once
    assert (tmp_path / "part" / "lightning_logs" / "version_0" / "metrics.csv").read_bytes() == expected
    assert read_checkpoint_metadata(tmp_path / "part" / "ckpt" / "last.ckpt")["run_id"] == record["run_id"]


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_last_ckpt_is_overwritten_by_a_resume_and_never_by_a_fresh_run(tmp_path):
    run(tmp_path, max_epochs=1)
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("*.ckpt")) == ["epoch=0-step=8.ckpt", "last.ckpt"]
    with warnings.catch_warnings(record=True) as caught:
        install_noise_filters()
        # other options (keep one epoch file, by step): the resumed run's state starts its own bookkeeping
        other = ResumableCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=1, monitor="step", mode="max", save_last=True)
        run(tmp_path, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"), checkpoint=other, max_epochs=2)
    texts = [str(w.message) for w in caught]
    assert not [t for t in texts if "not empty" in t or "Be aware" in t], texts
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("*.ckpt")) == [
        "epoch=0-step=8.ckpt",
        "epoch=1-step=16.ckpt",
        "last.ckpt",  # the newest state, in place: no last-v1.ckpt
    ]
    assert torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["global_step"] == 16
    with pytest.warns(UserWarning, match="exists and is not empty"):
        run(tmp_path / "fresh-into-used", max_epochs=1, checkpoint=ResumableCheckpoint(dirpath=tmp_path / "ckpt"))
    assert (tmp_path / "ckpt" / "epoch=0-step=8-v1.ckpt").is_file()  # a fresh run never overwrites


@pytest.mark.slow  # four runs
def test_two_runs_sharing_a_checkpoint_folder_never_overwrite_or_remove_each_others_files(tmp_path):
    shared = tmp_path / "shared"

    def callback():
        return ResumableCheckpoint(
            dirpath=shared, save_top_k=1, monitor="step", mode="max", save_last=True, save_on_train_epoch_end=True
        )

    run(tmp_path / "a", max_epochs=1, checkpoint=callback())
    with pytest.warns(UserWarning, match="exists and is not empty"):
        run(tmp_path / "b", max_epochs=1, checkpoint=callback())
    first, second = (read_checkpoint_metadata(shared / name)["run_id"] for name in ("last.ckpt", "last-v1.ckpt"))
    assert first != second
    # each run resumes its own last.ckpt and writes it again in place; neither writes over the other's files
    run(tmp_path / "a", ckpt_path=str(shared / "last.ckpt"), checkpoint=callback(), max_epochs=2)
    run(tmp_path / "b", ckpt_path=str(shared / "last-v1.ckpt"), checkpoint=callback(), max_epochs=2)
    owners = {path.name: read_checkpoint_metadata(path)["run_id"] for path in shared.glob("*.ckpt")}
    assert owners == {  # save_top_k=1: each run removed its own epoch-0 file, never the other's
        "last.ckpt": first,
        "epoch=1-step=16.ckpt": first,
        "last-v1.ckpt": second,
        "epoch=1-step=16-v1.ckpt": second,  # beside a's file of that name, not over it
    }
    assert torch.load(shared / "last.ckpt", weights_only=True)["global_step"] == 16
    assert torch.load(shared / "last-v1.ckpt", weights_only=True)["global_step"] == 16


@pytest.mark.slow  # trains and resumes
def test_files_a_resumed_bookkeeping_names_but_the_run_no_longer_owns_are_never_removed_or_overwritten(tmp_path):
    def callback():
        return ResumableCheckpoint(
            dirpath=tmp_path / "ckpt",
            save_top_k=1,
            monitor="step",
            mode="max",
            save_last=True,
            save_on_train_epoch_end=True,
        )

    run(tmp_path, max_epochs=1, checkpoint=callback())
    folder, old = tmp_path / "ckpt", tmp_path / "old.ckpt"
    (folder / "last.ckpt").replace(old)  # its state names epoch=0-step=8.ckpt (top 1) and last.ckpt
    for name in ("last.ckpt", "epoch=0-step=8.ckpt"):  # since then, a user's files took both names
        (folder / name).write_bytes(b"a user's file")
    run(tmp_path, ckpt_path=str(old), checkpoint=callback(), max_epochs=2)
    assert sorted(p.name for p in folder.iterdir()) == [
        "epoch=0-step=8.ckpt",
        "epoch=1-step=16.ckpt",
        "last-v1.ckpt",
        "last.ckpt",
    ]
    assert (folder / "last.ckpt").read_bytes() == (folder / "epoch=0-step=8.ckpt").read_bytes() == b"a user's file"
    assert torch.load(folder / "last-v1.ckpt", weights_only=True)["global_step"] == 16
