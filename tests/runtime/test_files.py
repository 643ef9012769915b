"""The run's files: never written through a planted link, never into a folder or a special file, and a
read-only folder named."""

from __future__ import annotations

import os

import pytest

from comlrl_lightning.errors import RunStateError
from comlrl_lightning.runtime.files import (
    ensure_writable_folder,
    open_in_place,
    refuse_non_regular,
    write_atomically,
)
from comlrl_lightning.runtime.folder_lock import FolderLock
from tests.helpers.read_only import read_only_folder


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text("keep me")
    return path


def test_a_link_planted_as_the_temporary_file_is_not_followed(tmp_path, victim):
    target = tmp_path / "run" / "iteration_0001.json"
    target.parent.mkdir()
    (target.parent / "iteration_0001.json.tmp").symlink_to(victim)
    write_atomically(target, b"round")
    assert victim.read_text() == "keep me" and target.read_bytes() == b"round"
    assert not (target.parent / "iteration_0001.json.tmp").exists()


def test_a_link_at_the_target_is_replaced_not_written_through(tmp_path, victim):
    target = tmp_path / "reward_curve.png"
    target.symlink_to(victim)
    write_atomically(target, b"png")
    assert victim.read_text() == "keep me" and not target.is_symlink() and target.read_bytes() == b"png"


def test_a_folder_at_the_target_is_refused_by_name(tmp_path):
    (tmp_path / "x.json").mkdir()
    with pytest.raises(RunStateError, match=r"x\.json \(a file the run writes\) is a folder, not a regular file"):
        write_atomically(tmp_path / "x.json", b"{}")


def test_a_lock_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path, victim):
    folder = tmp_path / "preference_replay"
    folder.mkdir()
    (folder / ".lock").symlink_to(victim)
    with pytest.raises(
        RunStateError, match=r"\.lock \(the folder's lock file\) is a symbolic link, not a regular file"
    ):
        FolderLock(folder).acquire()
    assert victim.read_text() == "keep me"


def test_a_lock_that_is_a_folder_or_a_fifo_is_refused_by_name(tmp_path):
    (tmp_path / "a" / ".lock").mkdir(parents=True)
    with pytest.raises(RunStateError, match=r"a/\.lock \(the folder's lock file\) is a folder"):
        FolderLock(tmp_path / "a").acquire()
    (tmp_path / "b").mkdir()
    os.mkfifo(tmp_path / "b" / ".lock")
    with pytest.raises(RunStateError, match=r"b/\.lock \(the folder's lock file\) is a special file"):
        FolderLock(tmp_path / "b").acquire()


def test_refuse_non_regular_allows_files_and_nothing(tmp_path, victim):
    refuse_non_regular(victim, "x")
    refuse_non_regular(tmp_path / "absent", "x")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(RunStateError, match="is a symbolic link"):
        refuse_non_regular(tmp_path / "link", "the run's config")
    refuse_non_regular(tmp_path / "link", "x", links=True)
    os.close(open_in_place(tmp_path / "fresh", "x"))  # created as a regular file
    assert (tmp_path / "fresh").is_file()


def test_a_path_through_a_file_is_not_a_folder(tmp_path, victim):
    with pytest.raises(RunStateError, match="is not a folder"):
        ensure_writable_folder(victim / "sub", "a run folder")


@pytest.fixture
def read_only(tmp_path):
    with read_only_folder(tmp_path / "read-only") as folder:
        yield folder


def test_a_read_only_folder_is_named_before_anything_is_written(read_only):
    with pytest.raises(RunStateError, match=rf"{read_only} is not writable \((read-only file system|permission)"):
        FolderLock(read_only).acquire()
    with pytest.raises(RunStateError, match=rf"{read_only} is not writable"):
        write_atomically(read_only / "iteration_0001.json", b"{}")
    with pytest.raises(RunStateError, match="is not writable"):
        ensure_writable_folder(read_only / "sub", "a run folder")


def test_a_writer_function_streams_into_the_file_and_a_failure_keeps_the_old_bytes(tmp_path):
    target = tmp_path / "last.ckpt"
    write_atomically(target, lambda handle: [handle.write(part) for part in (b"new ", b"bytes")])
    assert target.read_bytes() == b"new bytes"

    def fails_halfway(handle):
        handle.write(b"torn")
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, fails_halfway)
    assert target.read_bytes() == b"new bytes" and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
