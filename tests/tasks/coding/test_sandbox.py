"""What a program may use: limits, environment, readable paths, spare uids (no process started)."""

from __future__ import annotations

import os

import pytest

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.tasks.coding.sandbox import (
    MAX_SLOTS,
    THREAD_VARIABLES,
    RunLimits,
    SlotPool,
    environment,
    readable_paths,
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
