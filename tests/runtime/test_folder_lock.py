"""The folder lock: one run per replay or snapshot folder, across processes and within one."""

from __future__ import annotations

import json
import os
import socket

import pytest

from comlrl_lightning.runtime.folder_lock import FolderInUseError, FolderLock
from tests.helpers.iterative_run import make_run

HOLD_LOCK = """
import sys, time
from comlrl_lightning.runtime.folder_lock import FolderLock
FolderLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_two_runs_cannot_share_a_replay_folder_and_a_dead_runs_lock_does_not_block(tmp_path):
    import subprocess
    import sys

    replay = tmp_path / "run" / "preference_replay"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(replay)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        module, datamodule, trainer = make_run(tmp_path / "run", data=dict(num_iterations=1), max_epochs=2)
        with pytest.raises(FolderInUseError, match=rf"{replay} is in use by another run \(process {holder.pid} on "):
            trainer.fit(module, datamodule)
        assert not list(replay.glob("iteration_*.json"))  # refused before the first round was collected
    finally:
        holder.kill()  # SIGKILL: no clean-up, the kernel drops the lock
        holder.wait()
    module, datamodule, trainer = make_run(tmp_path / "run", data=dict(num_iterations=1), max_epochs=2)
    trainer.fit(module, datamodule)
    assert [p.name for p in replay.glob("iteration_*.json")] == ["iteration_0001.json"]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_second_run_in_the_same_process_is_refused_and_a_finished_run_releases(tmp_path):
    other = FolderLock(tmp_path / "preference_replay").acquire()  # a run of this process that is still going
    module, datamodule, trainer = make_run(tmp_path, data=dict(num_iterations=1), max_epochs=2)
    with pytest.raises(FolderInUseError, match=f"process {os.getpid()} on"):
        trainer.fit(module, datamodule)
    other.release()
    module, datamodule, trainer = make_run(tmp_path, data=dict(num_iterations=1), max_epochs=2)
    trainer.fit(module, datamodule)
    assert not any(lock.held for lock in datamodule.folder_locks) and datamodule.folder_locks == []
    FolderLock(tmp_path / "preference_replay").acquire().release()  # free again after the run


def test_a_second_lock_in_this_process_is_refused_naming_the_holder_until_the_first_is_released(tmp_path):
    (tmp_path / "replay").mkdir()
    (tmp_path / "replay" / ".lock").write_text(json.dumps({"pid": 1, "host": "a dead run's" + " host" * 40}))
    first = FolderLock(tmp_path / "replay").acquire()  # a dead run's record is replaced, not written over
    assert first.held and first.acquire() is first  # acquiring a held lock again is a no-op
    record = json.loads((tmp_path / "replay" / ".lock").read_text())
    assert record == {"pid": os.getpid(), "host": socket.gethostname()}
    second = FolderLock(tmp_path / "replay")
    with pytest.raises(FolderInUseError) as error:
        second.acquire()
    assert str(error.value).startswith(
        f"{tmp_path / 'replay'} is in use by another run (process {os.getpid()} on {socket.gethostname()})."
    )
    assert "preference_replay_dir" in str(error.value) and not second.held
    first.release()
    assert not first.held
    second.acquire().release()  # free once released
    first.release()  # releasing twice is harmless


def test_a_holder_record_that_cannot_be_read_still_refuses_the_folder(tmp_path):
    first = FolderLock(tmp_path).acquire()
    try:
        (tmp_path / ".lock").write_text("not json")  # the same file: the lock stays held
        with pytest.raises(FolderInUseError, match=r"in use by another run \(a process that is still running\)"):
            FolderLock(tmp_path).acquire()
    finally:
        first.release()
