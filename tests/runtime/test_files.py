"""The run's files: never written through a planted link (symbolic or hard), never into a folder or a
special file, never read past a bound, and a read-only folder named."""

from __future__ import annotations

import os
import resource

import pytest

from comlrl_lightning.cli import main
from comlrl_lightning.errors import RunStateError
from comlrl_lightning.runtime.files import (
    FileTooLargeError,
    ensure_writable_folder,
    open_in_place,
    own_copy,
    read_bounded,
    refuse_non_regular,
    swap_folder,
    write_atomically,
)
from comlrl_lightning.runtime.folder_lock import FolderLock
from tests.helpers.cli_helpers import TINY_CLI
from tests.helpers.iterative_run import make_run
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


def test_a_bounded_read_refuses_a_big_sparse_file_without_reading_it(tmp_path):
    big = tmp_path / "checkpoint_owner.json"
    with big.open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB that takes no space on disk
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(
        FileTooLargeError, match=r"checkpoint_owner\.json \(an owner file\) is 1073741824 bytes, more than the 65536"
    ):
        read_bounded(big, 65536, "an owner file")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: nothing was read
    small = tmp_path / "small.json"
    small.write_bytes(b"{}")
    assert read_bounded(small, 2, "a file") == b"{}"
    with pytest.raises(FileTooLargeError):
        read_bounded(small, 1, "a file")


def test_a_bounded_read_never_follows_a_link_or_reads_a_fifo(tmp_path, victim):
    (tmp_path / "link.json").symlink_to(victim)
    with pytest.raises(RunStateError, match="is a symbolic link"):
        read_bounded(tmp_path / "link.json", 100, "an owner file")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(RunStateError, match="not a regular file"):
        read_bounded(tmp_path / "fifo.json", 100, "an owner file")


def test_a_hard_link_gets_a_copy_of_its_own_before_it_is_rewritten_in_place(tmp_path, victim):
    log = tmp_path / "logs" / "hparams.yaml"
    log.parent.mkdir()
    os.link(victim, log)  # another name of the user's file
    own_copy(log, "a log file")
    assert os.stat(log).st_ino != os.stat(victim).st_ino and os.stat(victim).st_nlink == 1
    with log.open("w") as handle:  # what Lightning does with hparams.yaml
        handle.write("lr: 1")
    assert victim.read_text() == "keep me" and log.read_text() == "lr: 1"
    inode = os.stat(log).st_ino
    own_copy(log, "a log file")  # a file with one name is left as it is
    own_copy(tmp_path / "logs" / "metrics.csv", "a log file")  # and nothing is fine
    assert os.stat(log).st_ino == inode and not (tmp_path / "logs" / "metrics.csv").exists()


def test_a_lock_that_is_a_hard_link_is_held_without_writing_the_other_name(tmp_path, victim):
    folder = tmp_path / "replay"
    folder.mkdir()
    os.link(victim, folder / ".lock")
    lock = FolderLock(folder).acquire()
    try:
        assert lock.held and victim.read_text() == "keep me"
    finally:
        lock.release()


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


def test_swap_folder_replaces_a_folder_as_a_whole_and_hands_the_old_one_to_remove(tmp_path):
    target, staging = tmp_path / "out", tmp_path / ".out.tmp"
    staging.mkdir()
    (staging / "new.txt").write_text("new")
    removed = []
    swap_folder(staging, target, removed.append)  # nothing there yet: nothing to remove
    assert removed == [] and (target / "new.txt").read_text() == "new" and not staging.exists()
    staging.mkdir()
    (staging / "newer.txt").write_text("newer")
    swap_folder(staging, target, removed.append)
    assert sorted(p.name for p in target.iterdir()) == ["newer.txt"]
    (old,) = removed  # the previous folder, renamed aside under a unique name beside the target
    assert old.parent == tmp_path and old.name.startswith(".out.") and old.name.endswith(".old")
    assert (old / "new.txt").read_text() == "new"
    staging.mkdir()
    swap_folder(staging, target)  # the default removes the previous folder with what it holds
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.") and p != old] == []


@pytest.mark.parametrize("name", ["config.yaml", "hparams.yaml", "metrics.csv"])
def test_files_rewritten_in_place_are_never_written_through_a_planted_link(tmp_path, capsys, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    log_dir = tmp_path / "run" / "lightning_logs" / "fixed"  # a fixed log folder, as a resumed run may keep
    log_dir.mkdir(parents=True)
    (log_dir / name).symlink_to(victim)
    args = ["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path / "run")]
    args += ["--trainer.logger.init_args.version", "fixed", "--data.init_args.num_train_epochs", "1", *TINY_CLI]
    # metrics.csv too: the CSV log a resumed run continues is read and appended to, never through a link
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and f"error: {log_dir / name} (" in err
    assert "is a symbolic link, not a regular file" in err
    assert victim.read_text() == "keep me"


def test_a_read_only_replay_folder_is_named_before_the_first_round(tmp_path):
    from comlrl_lightning.errors import RunStateError
    from tests.helpers.read_only import read_only_folder

    with read_only_folder(tmp_path / "replay") as folder:
        module, datamodule, trainer = make_run(tmp_path, data=dict(preference_replay_dir=str(folder)), max_epochs=2)
        with pytest.raises(RunStateError, match=rf"^{folder} is not writable \(.*\); the run writes its files there"):
            trainer.fit(module, datamodule)
        assert module._team is None  # named before any model loaded
