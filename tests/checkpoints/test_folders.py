"""Checkpoint folders the seed API owns only by what it wrote: content-bound owner files, fresh staging
folders, a limit that never removes more progress, refused folders and bounded owner reads, on real
runs of the embedded default."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from comlrl_lightning.checkpoints.folders import (
    OWNER_FILE,
    CheckpointFolderError,
    check_destination,
    checkpoint_folder,
    folder_beside,
    owned_by,
    prune_folders,
    remove_written,
)
from comlrl_lightning.checkpoints.lineage import SeveralLinesError
from comlrl_lightning.checkpoints.metadata import CHECKPOINT_FOLDER, read_checkpoint_metadata
from comlrl_lightning.runtime.files import FileTooLargeError
from comlrl_lightning.validation import OptionError
from tests.trainers.test_checkpoints import folders, madpo_iter


def victim_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "keep.txt").write_text("mine")
    return path


@pytest.fixture(scope="module")
def one_round(tmp_path_factory):
    """One round with checkpoint_dir, after links were planted at the staging names an earlier version used."""
    root = tmp_path_factory.mktemp("one_round")
    victim = victim_folder(root / "victim")
    (root / "ckpt").mkdir()
    for name in (".checkpoint-1.tmp", ".checkpoint-1.old"):
        (root / "ckpt" / name).symlink_to(victim, target_is_directory=True)
    trainer = madpo_iter(root, 1)
    trainer.train(checkpoint_dir=str(root / "ckpt"))
    return dict(root=root, trainer=trainer, victim=victim)


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_staging_folders_are_fresh_and_a_planted_link_is_never_followed(one_round):
    root, victim = one_round["root"], one_round["victim"]
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]  # nothing written into it or removed from it
    assert sorted(p.name for p in (root / "ckpt").iterdir()) == [
        ".checkpoint-1.old",
        ".checkpoint-1.tmp",
        "checkpoint-1",
    ]
    assert all((root / "ckpt" / name).is_symlink() for name in (".checkpoint-1.old", ".checkpoint-1.tmp"))
    assert read_checkpoint_metadata(root / "ckpt" / "checkpoint-1")["sequence"] == 1


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_save_checkpoint_never_replaces_a_users_folder_or_another_runs(one_round, tmp_path):
    trainer = one_round["trainer"]
    users = victim_folder(tmp_path / "mine")
    (users / "checkpoint.ckpt").write_bytes(b"my own file of that name")
    with pytest.raises(CheckpointFolderError, match=r"is not a checkpoint folder of this run \(it holds keep\.txt\)"):
        trainer.save_checkpoint(str(users))
    assert sorted(p.name for p in users.iterdir()) == ["checkpoint.ckpt", "keep.txt"]
    assert (users / "checkpoint.ckpt").read_bytes() == b"my own file of that name"
    saved = Path(trainer.save_checkpoint(str(tmp_path / "saved")))  # a new folder, then its own again
    assert Path(trainer.save_checkpoint(str(saved))) == saved and owned_by(saved, trainer.record.run_id)
    other = madpo_iter(tmp_path / "other", 1)
    other.train()
    with pytest.raises(FileExistsError, match="not a checkpoint folder of this run"):  # another run's
        other.save_checkpoint(str(saved))
    assert owned_by(saved, trainer.record.run_id) is not None
    (saved / "notes.txt").write_text("added by the user")
    with pytest.raises(CheckpointFolderError, match="notes.txt"):
        trainer.save_checkpoint(str(saved))


def test_ownership_is_bound_to_the_folders_own_checkpoint_not_to_a_copied_owner_file(one_round, tmp_path):
    run_id, folder = one_round["trainer"].record.run_id, one_round["root"] / "ckpt" / "checkpoint-1"
    assert owned_by(folder, run_id).sequence == 1
    copied = tmp_path / "checkpoint-1"
    shutil.copytree(folder, copied)  # a copy: new files, not the ones the run wrote
    assert owned_by(copied, run_id) is None
    forged = victim_folder(tmp_path / "checkpoint-7")
    shutil.copy(folder / OWNER_FILE, forged / OWNER_FILE)  # an owner file copied into a user's folder
    assert owned_by(forged, run_id) is None
    with pytest.raises(OptionError, match="already holds checkpoint-7 of another run"):
        check_destination(tmp_path, run_id, 1)
    remove_written(forged)  # only what the run writes goes; the user's file and folder stay
    assert sorted(p.name for p in forged.iterdir()) == ["keep.txt"]


def test_a_big_sparse_owner_file_is_refused_without_being_read(one_round, tmp_path):
    folder = tmp_path / "ckpt" / "checkpoint-2"
    folder.mkdir(parents=True)
    with (folder / OWNER_FILE).open("wb") as handle:
        handle.truncate(1 << 30)
    with pytest.raises(FileTooLargeError, match=r"checkpoint_owner\.json .* is 1073741824 bytes, more than the 65536"):
        check_destination(tmp_path / "ckpt", one_round["trainer"].record.run_id, 0)


@pytest.mark.slow  # four rounds of training
def test_a_resume_from_an_older_checkpoint_with_a_limit_keeps_newer_ones_and_forged_folders(tmp_path):
    ckpt = tmp_path / "ckpt"
    first = madpo_iter(tmp_path, 3)
    first.train(checkpoint_dir=str(ckpt))
    forged = victim_folder(ckpt / "checkpoint-0")  # a user's folder with a copied owner file: never pruned
    owner = json.loads((ckpt / "checkpoint-1" / OWNER_FILE).read_text())
    (forged / OWNER_FILE).write_text(json.dumps(dict(owner, sequence=0)))
    newest = os.stat(ckpt / "checkpoint-3" / "checkpoint.ckpt").st_ino
    branch = madpo_iter(tmp_path, 2)
    branch.train(resume_from_checkpoint=str(ckpt / "checkpoint-1"), checkpoint_total_limit=1)
    # checkpoint-2 redone, checkpoint-1 pruned; checkpoint-3 (more progress than the branch reached) kept
    assert folders(ckpt) == ["checkpoint-0", "checkpoint-2", "checkpoint-3"]
    assert os.stat(ckpt / "checkpoint-3" / "checkpoint.ckpt").st_ino == newest
    assert sorted(p.name for p in forged.iterdir()) == ["checkpoint_owner.json", "keep.txt"]
    # a folder resume now sees two lines of the run: refused, naming both
    with pytest.raises(SeveralLinesError, match=r"several lines of one run.*checkpoint-3.*checkpoint-2"):
        madpo_iter(tmp_path, 4).train(resume_from_checkpoint=str(ckpt))
    resumed = madpo_iter(tmp_path, 4)  # a path resumes: the branch goes on beside the old line
    resumed.train(resume_from_checkpoint=str(ckpt / "checkpoint-3"), checkpoint_dir=str(tmp_path / "more"))
    assert folders(tmp_path / "more") == ["checkpoint-4"]


def test_a_commits_folder_name_is_the_one_the_pattern_reads_back(tmp_path):
    folder = checkpoint_folder(tmp_path, 12)
    assert folder == tmp_path / "checkpoint-12"
    assert CHECKPOINT_FOLDER.fullmatch(folder.name).group(1) == "12"


def test_folders_go_beside_the_resumed_checkpoint(tmp_path):
    default = tmp_path / "out" / "checkpoints"
    assert folder_beside(None, default) == default
    # a checkpoint-N folder's checkpoint: its siblings go beside the folder
    assert folder_beside(tmp_path / "ckpt" / "checkpoint-3" / "checkpoint.ckpt", default) == tmp_path / "ckpt"
    # any other file (or another name inside a checkpoint-N folder): beside the file
    assert folder_beside(tmp_path / "ckpt" / "last.ckpt", default) == tmp_path / "ckpt"
    assert folder_beside(tmp_path / "checkpoint-3" / "last.ckpt", default) == tmp_path / "checkpoint-3"


def test_pruning_never_touches_folders_the_run_did_not_write(tmp_path):
    users = victim_folder(tmp_path / "checkpoint-1")
    latest = tmp_path / "checkpoint-2"
    latest.mkdir()
    prune_folders(tmp_path, latest, "0" * 32, limit=1)  # latest is not the run's either: nothing to do
    assert (users / "keep.txt").read_text() == "mine" and latest.is_dir()
