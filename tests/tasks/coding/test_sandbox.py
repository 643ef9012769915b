"""What a program may use: limits, environment, readable paths, spare uids and their host-wide
claim, stale folders (no program started)."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Tuple

import pytest

from comlrl_lightning.errors import ConfigurationError, RunStateError
from comlrl_lightning.tasks.coding.sandbox import (
    FOLDER_PREFIX,
    MAX_SLOTS,
    SPARE_UID_BASE,
    SPARE_UIDS,
    THREAD_VARIABLES,
    RunLimits,
    SlotPool,
    UidBlockClaim,
    environment,
    readable_paths,
    remove_stale_folders,
    spare_uid,
    uid_and_state,
)


def test_the_limits_are_the_launchers_setrlimit_values_with_cpu_just_above_the_wall_clock():
    limits = RunLimits().resource_limits(2.5)
    assert limits == {
        "cpu": 4,
        "address_space": 1 << 30,
        "file_size": 16 << 20,
        "open_files": 64,
        "processes": 8,
        "core": 0,
    }


@pytest.mark.parametrize("field", ["address_space_bytes", "open_files", "processes", "message_bytes"])
def test_a_limit_that_is_not_a_positive_integer_is_refused_by_name(field):
    with pytest.raises(ConfigurationError, match=f"RunLimits.{field}"):
        RunLimits(**{field: 0})


def test_the_environment_holds_nothing_of_the_trainers(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert environment() == {name: "1" for name in THREAD_VARIABLES}


def test_the_program_may_read_the_standard_library_but_not_site_packages():
    paths = readable_paths(("numpy",))
    everything = paths["path"] + paths["reads"] + paths["files"]
    assert not any("site-packages" in path for path in everything)
    assert any(os.path.isfile(os.path.join(path, "json", "__init__.py")) for path in paths["path"])
    assert [name for name, _ in paths["packages"]][:1] == ["numpy"]
    with pytest.raises(ConfigurationError, match="not an installed package"):
        readable_paths(("no_such_package_here",))


def test_spare_uids_are_per_slot_and_far_from_accounts():
    if os.geteuid() != 0:
        assert spare_uid(0) is None
        return
    uids = {spare_uid(slot) for slot in range(MAX_SLOTS)}
    assert len(uids) == MAX_SLOTS and min(uids) > 1 << 29 and max(uids) < 1 << 31
    assert min(uids) == SPARE_UID_BASE + SPARE_UIDS.block() * MAX_SLOTS  # this trainer's claimed block


def another_trainer(folder: str) -> Tuple[int, int]:
    """A process of its own that claims a block in ``folder`` and lives until killed: its pid and block."""
    read, write = os.pipe()
    hold, _ = os.pipe()  # nothing is ever written: the process waits on it for its end
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked process
        try:
            os.write(write, str(UidBlockClaim(folder).block()).encode())
            os.read(hold, 1)
        finally:
            os._exit(0)
    os.close(write)
    block = int(os.read(read, 16))
    os.close(read)
    return pid, block


@pytest.mark.slow  # forks
def test_two_trainers_never_share_a_uid_block_and_a_dead_ones_block_is_free_again(tmp_path):
    locks = str(tmp_path / "locks")
    first = UidBlockClaim(locks)
    assert first.block() == 0
    other, block = another_trainer(locks)
    try:
        assert block == 1  # block 0 is this process's
        assert UidBlockClaim(locks).block() == 2  # 0 and 1 are held
    finally:
        os.kill(other, signal.SIGKILL)
        os.waitpid(other, 0)
    assert UidBlockClaim(locks).block() == 1  # the dead trainer's block: its flock died with it
    first.release()
    assert UidBlockClaim(locks).block() == 0


@pytest.mark.slow  # forks
def test_a_process_forked_from_a_holder_claims_a_block_of_its_own(tmp_path):
    claim = UidBlockClaim(str(tmp_path / "locks"))
    assert claim.block() == 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked process
        try:
            os.write(write, str(claim.block()).encode())
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 16) == b"1"
    os.close(read)
    os.waitpid(pid, 0)
    assert claim.block() == 0


def test_a_planted_lock_folder_is_refused_by_name_and_a_planted_lock_file_never_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    with pytest.raises(RunStateError, match=f"{tmp_path / 'link'} is not a folder"):
        UidBlockClaim(str(tmp_path / "link")).block()
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(RunStateError, match=f"{tmp_path / 'open'} is owned by uid .* writable by no one else"):
        UidBlockClaim(str(tmp_path / "open")).block()
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    target = tmp_path / "target"
    target.write_text("keep")
    (locks / "block-0.lock").symlink_to(target)
    assert UidBlockClaim(str(locks)).block() == 1
    assert target.read_text() == "keep"


def test_a_slot_is_the_lowest_free_one_and_comes_back():
    pool = SlotPool(size=2)
    with pool.slot() as first, pool.slot() as second:
        assert (first, second) == (0, 1)
    with pool.slot() as again:
        assert again == 0


def test_a_status_file_gives_its_real_uid_and_state_and_a_name_cannot_fake_them():
    with open("/proc/self/status", encoding="ascii", errors="replace") as status:
        assert uid_and_state(status) == (os.getuid(), "R (running)")
    lines = [
        "Name:\tUid:\t0 0 0 0 State: Z\\nUid:\t0\n",
        "State:\tS (sleeping)\n",
        "Uid:\t1234\t0\t0\t0\n",
        "Uid:\t0\n",
    ]
    assert uid_and_state(lines) == (1234, "S (sleeping)")
    assert uid_and_state(["Uid:\t7 7 7 7\n"]) == (7, "")  # no state: counted as live
    with pytest.raises(ValueError):
        uid_and_state(["Name:\tx\n", "State:\tR\n"])


def test_stale_run_folders_of_gone_trainers_are_removed_whatever_they_hold(monkeypatch):
    """A folder 1,100 levels deep with a mode-000 folder and a link out (a recursive removal raises
    ``RecursionError``) of a trainer that is gone goes; a live trainer's stays."""
    temp = Path(tempfile.mkdtemp(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    gone = 1 << 22 | 1  # a pid no process can have: above the kernel's largest pid_max
    stale, live = temp / f"{FOLDER_PREFIX}{gone}-abc", temp / f"{FOLDER_PREFIX}{os.getppid()}-abc"
    live.mkdir()
    fd = os.open(temp, os.O_RDONLY)
    for name in [stale.name] + ["d"] * 1100:
        os.mkdir(name, dir_fd=fd)
        deeper = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.symlink(str(live), "out", dir_fd=fd)
    os.mkdir("closed", 0o000, dir_fd=fd)
    os.close(fd)
    assert remove_stale_folders() == [stale]
    assert not stale.exists() and live.is_dir()
    live.rmdir()
    temp.rmdir()
