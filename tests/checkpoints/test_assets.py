"""A checkpoint's asset folder: a copy of each live file once, hard links between checkpoints, verified
restores (copies), fresh staging folders."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest

from comlrl_lightning.checkpoints.assets import (
    AssetError,
    CheckpointAssets,
    asset,
    asset_folder,
    remove_assets,
    write_assets,
)
from comlrl_lightning.errors import DataError, RunStateError


def live_file(folder: Path, name: str, data: bytes) -> dict:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return asset("preference_replay", name, path, hashlib.sha256(data).hexdigest(), len(data))


def other_file_system() -> Path:
    """A folder on another file system than the test's (tmpfs at /dev/shm), or skip."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or os.stat(shm).st_dev == os.stat(tempfile.gettempdir()).st_dev:
        pytest.skip("no second file system to copy across")
    return Path(tempfile.mkdtemp(dir=shm))


def test_assets_copy_the_live_file_once_and_link_each_other(tmp_path):
    entries = [live_file(tmp_path / "run", "iteration_0001.json", b"one"), live_file(tmp_path / "run", "x/y.bin", b"2")]
    folder = asset_folder(tmp_path / "ckpt" / "last.ckpt")
    assert folder == tmp_path / "ckpt" / "last.assets"
    write_assets(entries, folder)
    other = asset_folder(tmp_path / "ckpt" / "epoch=1.ckpt")
    write_assets(entries, other)  # a second checkpoint beside the first
    for entry in entries:
        stored, linked = (f / "preference_replay" / entry["name"] for f in (folder, other))
        assert os.stat(stored).st_ino != os.stat(entry["source"]).st_ino  # never the live file's inode
        assert os.stat(stored).st_ino == os.stat(linked).st_ino  # the history is stored once in the checkpoints
    live = Path(entries[0]["source"])
    with live.open("r+b") as handle:  # an edit of the live file in place leaves every checkpoint intact
        handle.write(b"ONE")
    assert (folder / "preference_replay" / "iteration_0001.json").read_bytes() == b"one"
    # written again with fewer files: the folder holds exactly the new list, and no staging is left
    write_assets(entries[:1], folder)
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == ["iteration_0001.json"]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["epoch=1.assets", "last.assets"]
    remove_assets(tmp_path / "ckpt" / "last.ckpt")
    assert not folder.exists() and live.read_bytes() == b"ONE"
    assert (other / "preference_replay" / "iteration_0001.json").read_bytes() == b"one"


def test_a_donor_rewritten_in_place_with_its_size_and_mtime_set_back_is_hashed_again(tmp_path):
    entry = live_file(tmp_path / "run", "iteration_0001.json", b"one")
    write_assets([entry], asset_folder(tmp_path / "ckpt" / "a.ckpt"))
    write_assets([entry], asset_folder(tmp_path / "ckpt" / "b.ckpt"))  # links a's copy: its hash is now remembered
    donor = asset_folder(tmp_path / "ckpt" / "a.ckpt") / "preference_replay" / "iteration_0001.json"
    before = os.stat(donor)
    donor.write_bytes(b"ONE")  # same size; only the ctime tells the change
    os.utime(donor, ns=(before.st_atime_ns, before.st_mtime_ns))
    write_assets([entry], asset_folder(tmp_path / "ckpt" / "c.ckpt"))
    stored = asset_folder(tmp_path / "ckpt" / "c.ckpt") / "preference_replay" / "iteration_0001.json"
    assert stored.read_bytes() == b"one"


def test_an_asset_of_an_earlier_version_that_shares_the_live_files_inode_is_not_linked(tmp_path):
    entry = live_file(tmp_path / "run", "iteration_0001.json", b"one")
    old = asset_folder(tmp_path / "ckpt" / "old.ckpt") / "preference_replay"
    old.mkdir(parents=True)
    os.link(entry["source"], old / "iteration_0001.json")  # what an earlier version wrote: a link to the live file
    write_assets([entry], asset_folder(tmp_path / "ckpt" / "new.ckpt"))
    stored = asset_folder(tmp_path / "ckpt" / "new.ckpt") / "preference_replay" / "iteration_0001.json"
    assert os.stat(stored).st_ino != os.stat(entry["source"]).st_ino and stored.read_bytes() == b"one"


def test_staging_folders_are_fresh_and_a_planted_link_or_folder_is_never_used(tmp_path):
    entry = live_file(tmp_path / "run", "iteration_0001.json", b"one")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "last.assets.tmp").symlink_to(victim, target_is_directory=True)  # the names an earlier version used
    (ckpt / "last.assets.old").mkdir()
    (ckpt / "last.assets.old" / "keep.txt").write_text("mine too")
    write_assets([entry], asset_folder(ckpt / "last.ckpt"))
    remove_assets(ckpt / "last.ckpt")
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (ckpt / "last.assets.old" / "keep.txt").read_text() == "mine too"


def test_assets_are_verified_copies_across_file_systems(tmp_path):
    entries = [live_file(other_file_system(), "iteration_0001.json", b"round one")]
    folder = asset_folder(tmp_path / "checkpoint.ckpt")
    write_assets(entries, folder)
    stored = folder / "preference_replay" / "iteration_0001.json"
    assert stored.read_bytes() == b"round one" and os.stat(stored).st_dev != os.stat(entries[0]["source"]).st_dev
    bad = dict(entries[0], sha256="0" * 64)  # a copy is checked against the digest
    with pytest.raises(AssetError, match="differs from the sha256"):
        write_assets([bad], folder)


def test_a_resume_restores_missing_and_differing_files_and_keeps_good_ones(tmp_path):
    entry = live_file(tmp_path / "run", "iteration_0001.json", b"round one")
    folder = asset_folder(tmp_path / "ckpt" / "checkpoint.ckpt")
    write_assets([entry], folder)
    target = tmp_path / "elsewhere" / "iteration_0001.json"
    assets = CheckpointAssets.of_checkpoint(tmp_path / "ckpt" / "checkpoint.ckpt")
    assets.ensure("preference_replay", "iteration_0001.json", entry["sha256"], target.parent)  # missing: put back
    assert target.read_bytes() == b"round one" and assets.restored == ["preference_replay/iteration_0001.json"]
    target.unlink()
    target.write_bytes(b"edited")  # differs: replaced by the checkpoint's bytes
    assets.ensure("preference_replay", "iteration_0001.json", entry["sha256"], target.parent)
    assert target.read_bytes() == b"round one"
    stored = folder / "preference_replay" / "iteration_0001.json"
    assert os.stat(target).st_ino != os.stat(stored).st_ino  # a copy: editing the run's file leaves the asset
    assets.ensure("preference_replay", "iteration_0001.json", entry["sha256"], target.parent)  # good: left alone
    assert len(assets.restored) == 2


def test_a_restore_fails_naming_the_file_when_no_copy_holds_it(tmp_path):
    entry = live_file(tmp_path / "run", "iteration_0001.json", b"round one")
    write_assets([entry], asset_folder(tmp_path / "checkpoint.ckpt"))
    stored = asset_folder(tmp_path / "checkpoint.ckpt") / "preference_replay" / "iteration_0001.json"
    stored.unlink()
    stored.write_bytes(b"tampered")
    target = tmp_path / "run" / "iteration_0001.json"
    target.unlink()
    assets = CheckpointAssets.of_checkpoint(tmp_path / "checkpoint.ckpt")
    with pytest.raises(RunStateError, match=r"iteration_0001\.json differs from the sha256"):
        assets.ensure("preference_replay", "iteration_0001.json", entry["sha256"], target.parent)
    assert not target.exists()
    with pytest.raises(AssetError, match=r"iteration_0001\.json is missing .* has no asset folder"):
        CheckpointAssets(None).ensure("preference_replay", "iteration_0001.json", entry["sha256"], target.parent)


@pytest.mark.parametrize("name", ["../outside.json", "/etc/passwd", "a/../../b", ".hidden", ""])
def test_names_from_a_checkpoint_stay_inside_their_folders(tmp_path, name):
    entry = live_file(tmp_path / "run", "iteration_0001.json", b"x")
    with pytest.raises(DataError, match="not a plain relative path"):  # a checkpoint is data
        write_assets([dict(entry, name=name)], tmp_path / "a.assets")
    write_assets([entry], tmp_path / "a.assets")
    with pytest.raises(DataError, match="not a plain relative path"):
        CheckpointAssets(tmp_path / "a.assets").ensure("preference_replay", name, entry["sha256"], tmp_path / "t")


def test_nothing_is_read_through_a_symbolic_link(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"secret")
    digest = hashlib.sha256(b"secret").hexdigest()
    link = tmp_path / "run" / "iteration_0001.json"
    link.parent.mkdir()
    link.symlink_to(secret)
    with pytest.raises(AssetError, match="not a regular file"):
        write_assets([asset("preference_replay", "iteration_0001.json", link, digest, 6)], tmp_path / "c.assets")
    folder = tmp_path / "d.assets"
    (folder / "preference_replay").mkdir(parents=True)
    (folder / "preference_replay" / "iteration_0001.json").symlink_to(secret)
    with pytest.raises(AssetError, match="leads outside the asset folder"):
        CheckpointAssets(folder).ensure("preference_replay", "iteration_0001.json", digest, tmp_path / "restored")
    (folder / "preference_replay" / "iteration_0001.json").unlink()
    (folder / "preference_replay").rmdir()
    (folder / "preference_replay").symlink_to(tmp_path / "run", target_is_directory=True)
    with pytest.raises(AssetError, match="leads outside the asset folder"):
        CheckpointAssets(folder).ensure("preference_replay", "iteration_0001.json", digest, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()
