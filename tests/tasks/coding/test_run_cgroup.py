"""The run's cgroup: which hierarchy is found, what a run's group holds, stale groups (no program started)."""

from __future__ import annotations

import os
from pathlib import Path

from comlrl_lightning.tasks.coding.run_cgroup import (
    CgroupParents,
    RunCgroup,
    find_parents,
    folder_of,
    parse_mounts,
    parse_own_groups,
    remove_stale_groups,
)
from comlrl_lightning.tasks.coding.sandbox import FOLDER_PREFIX

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 /outer /sys/fs/cgroup/unified\\040two rw,relatime - cgroup2 cgroup2 rw
"""
OWN = "4:memory:/jobs/one\n8:pids:/\n2:cpu,cpuacct:/x\n0::/outer/mine\n"


def test_the_cgroup_mounts_and_this_processs_groups_are_read():
    mounts = parse_mounts(MOUNTINFO.splitlines())
    assert [(point, kind, options[-1]) for _, point, kind, options in mounts] == [
        ("/sys/fs/cgroup/memory", "cgroup", "memory"),
        ("/sys/fs/cgroup/pids", "cgroup", "pids"),
        ("/sys/fs/cgroup/unified two", "cgroup2", "rw"),
    ]
    own = parse_own_groups(OWN.splitlines())
    assert own == {"memory": "/jobs/one", "pids": "/", "cpu": "/x", "cpuacct": "/x", "": "/outer/mine"}
    assert folder_of(mounts[0], own["memory"]) == Path("/sys/fs/cgroup/memory/jobs/one")
    assert folder_of(mounts[2], own[""]) == Path("/sys/fs/cgroup/unified two/mine")
    assert folder_of(mounts[2], "/elsewhere") is None  # a cgroup the mount does not show


def fake_hierarchy(tmp_path: Path, v2_controllers: str) -> Path:
    """Files like the machine's (``/proc/self/mountinfo`` and ``cgroup``) naming folders under ``tmp_path``."""
    for folder in ("memory/jobs/one", "pids", "unified/mine"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "unified/mine/cgroup.subtree_control").write_text(v2_controllers)
    mountinfo = MOUNTINFO.replace("/sys/fs/cgroup", str(tmp_path)).replace("unified\\040two", "unified")
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(OWN)
    return tmp_path


def test_v2_is_taken_where_it_offers_memory_and_pids_else_v1_else_none(tmp_path):
    files = fake_hierarchy(tmp_path, "memory pids")
    found = find_parents(str(files / "mountinfo"), str(files / "cgroup"))
    assert found == CgroupParents(2, tmp_path / "unified/mine", None)
    (tmp_path / "unified/mine/cgroup.subtree_control").write_text("cpu")  # asking does not give them here
    found = find_parents(str(files / "mountinfo"), str(files / "cgroup"))
    assert found == CgroupParents(1, tmp_path / "memory/jobs/one", tmp_path / "pids")
    (tmp_path / "unified/mine").rename(tmp_path / "unified/gone")
    found = find_parents(str(files / "mountinfo"), str(files / "cgroup"))
    assert found == CgroupParents(1, tmp_path / "memory/jobs/one", tmp_path / "pids")
    (tmp_path / "pids").rename(tmp_path / "no-pids")
    assert find_parents(str(files / "mountinfo"), str(files / "cgroup")) is None
    assert find_parents(str(tmp_path / "missing"), str(files / "cgroup")) is None


def test_a_runs_group_holds_its_limits_and_is_removed(tmp_path):
    parents = CgroupParents(1, tmp_path / "memory", tmp_path / "pids")
    parents.memory.mkdir()
    parents.pids.mkdir()
    group = RunCgroup.for_run(parents, slot=3, memory_bytes=256 << 20, processes=8)
    memory, pids = group.folders
    assert memory.name.startswith(f"{FOLDER_PREFIX}{os.getpid()}-3-") and pids.name == memory.name
    assert (memory / "memory.limit_in_bytes").read_text() == str(256 << 20)
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == str(256 << 20)
    assert (pids / "pids.max").read_text() == "8"
    assert group.procs_files == [str(memory / "cgroup.procs"), str(pids / "cgroup.procs")]
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert group.oom_kills() == 2
    for folder in group.folders:  # a real cgroup's files vanish with it; these are plain files
        for file in folder.iterdir():
            file.unlink()
    assert group.remove() and not memory.exists() and not pids.exists()


def test_a_v2_group_has_no_swap_and_an_oom_kill_ends_the_whole_run(tmp_path):
    group = RunCgroup.for_run(CgroupParents(2, tmp_path, None), slot=0, memory_bytes=1 << 30, processes=8)
    (folder,) = group.folders
    assert {
        name: (folder / name).read_text() for name in ("memory.max", "memory.swap.max", "memory.oom.group", "pids.max")
    } == {
        "memory.max": str(1 << 30),
        "memory.swap.max": "0",
        "memory.oom.group": "1",
        "pids.max": "8",
    }
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n")
    assert group.oom_kills() == 1


def test_stale_groups_of_gone_trainers_are_removed_and_live_ones_kept(tmp_path):
    gone = 1 << 22 | 1  # a pid no process can have: above the kernel's largest pid_max
    stale, live = tmp_path / f"{FOLDER_PREFIX}{gone}-0-ab", tmp_path / f"{FOLDER_PREFIX}{os.getppid()}-0-ab"
    mine = tmp_path / f"{FOLDER_PREFIX}{os.getpid()}-0-ab"
    for folder in (stale, live, mine):
        folder.mkdir()
    assert remove_stale_groups(CgroupParents(2, tmp_path, None)) == [stale]
    assert live.is_dir() and mine.is_dir() and not stale.exists()
    assert remove_stale_groups(None) == []
