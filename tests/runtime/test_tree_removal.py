"""Removing a tree someone else made: deep, read-only, linked, with few descriptors; never raising."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from comlrl_lightning.runtime.tree_removal import remove_tree

NOBODY = 65534


def removed_as(user: int, path: Path) -> List[str]:
    """:func:`remove_tree` of ``path`` run by a forked process that gave up root for ``user``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked process
        try:
            os.setgroups([])
            os.setresgid(user, user, user)
            os.setresuid(user, user, user)
            os.write(write, json.dumps(remove_tree(path)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as reply:
        text = reply.read()
    os.waitpid(pid, 0)
    return json.loads(text)


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder another user may enter (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="comlrl-tree-removal-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fast_folder(tmp_path) -> Iterator[Path]:
    """A folder in memory where the machine has ``/dev/shm`` (a disk may take 5 ms per ``rmdir`` of
    a deep folder), else ``tmp_path``."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="comlrl-tree-removal-", dir="/dev/shm"))
    yield folder
    remove_tree(folder)


def deep_tree(root: Path, levels: int) -> Path:
    """What a program does with ``os.mkdir('d'); os.chdir('d')`` ``levels`` times (here through
    descriptors, so this process keeps its working folder), a file at the bottom; the top ``d``."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    return root / "d"


def test_a_tree_1500_levels_deep_is_removed_where_a_recursive_removal_fails(fast_folder):
    top = deep_tree(fast_folder, 1500)
    with pytest.raises(RecursionError):  # what the issue met: shutil's removal recurses
        shutil.rmtree(top, ignore_errors=True)
    assert remove_tree(top) == []
    assert list(fast_folder.iterdir()) == []


def test_a_path_that_is_gone_a_file_and_a_link_at_the_top(tmp_path):
    assert remove_tree(tmp_path / "nothing") == []
    (tmp_path / "file").write_text("x")
    assert remove_tree(tmp_path / "file") == [] and not (tmp_path / "file").exists()
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (tmp_path / "link").symlink_to(target)
    assert remove_tree(tmp_path / "link") == []
    assert not (tmp_path / "link").is_symlink() and (target / "keep.txt").read_text() == "keep"


def test_links_inside_are_removed_and_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "to-folder").symlink_to(outside)
    (tree / "a" / "b" / "to-file").symlink_to(outside / "keep.txt")
    (tree / "a" / "b" / "dangling").symlink_to(tmp_path / "nowhere")
    (tree / "a" / "b" / "loop").symlink_to(tree)
    assert remove_tree(tree) == []
    assert not tree.exists()
    assert [path.name for path in outside.iterdir()] == ["keep.txt"] and (outside / "keep.txt").read_text() == "keep"


def read_only_tree(root: Path, owner: Optional[int] = None) -> Path:
    """A tree (owned by ``owner``, where given) whose folders its program left read-only, mode 000
    and write-only, the top included."""
    top = root / "tree"
    for path in ("a/closed/inner", "a/read-only", "b"):
        (top / path).mkdir(parents=True)
    for path in ("a/closed/inner/f", "a/read-only/f", "b/f", "f"):
        (top / path).write_text("x")
    if owner is not None:
        subprocess.run(["chown", "-R", str(owner), str(top)], check=True)
    for path, mode in (("a/closed/inner", 0o000), ("a/closed", 0o000), ("a/read-only", 0o500), ("b", 0o300), ("", 0)):
        (top / path).chmod(mode)
    return top


def test_folders_left_read_only_or_mode_000_are_removed_by_root(tmp_path):
    assert remove_tree(read_only_tree(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the removal as another user")
@pytest.mark.slow  # forks a process that runs as another user
def test_folders_left_read_only_or_mode_000_are_removed_by_their_owner(shared_folder):
    """Without root's rights, the walk gives each folder its owner's rights before it lists or
    changes it (a test running as root alone would pass without that)."""
    read_only_tree(shared_folder, owner=NOBODY)
    assert removed_as(NOBODY, shared_folder / "tree") == []
    assert list(shared_folder.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make an entry its owner cannot remove")
@pytest.mark.slow  # forks a process that runs as another user
def test_what_cannot_be_removed_is_returned_and_the_rest_goes(shared_folder):
    tree = shared_folder / "tree"
    (tree / "free").mkdir(parents=True)
    (tree / "free" / "f").write_text("x")
    (tree / "roots").mkdir()
    (tree / "roots" / "f").write_text("x")
    (tree / "roots").chmod(0o755)
    subprocess.run(["chown", "-R", str(NOBODY), str(tree)], check=True)
    os.chown(tree / "roots", 0, 0)  # a folder of root's inside nobody's tree: nobody may not empty it
    assert removed_as(NOBODY, tree) == [f"{tree}/roots/f (Permission denied)"]
    assert not (tree / "free").exists() and (tree / "roots" / "f").exists()


def taken(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


@contextmanager
def free_descriptors(count: int) -> Iterator[None]:
    """Only ``count`` more descriptors may be opened in this block (the soft ``RLIMIT_NOFILE``)."""
    limit, free = 0, 0  # the limit: the (count + 1)-th free number (open ones may lie between free ones)
    while taken(limit) or free < count:
        free += not taken(limit)
        limit += 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_two_free_descriptors_are_enough_for_a_deep_tree(fast_folder):
    top = deep_tree(fast_folder, 1500)
    with free_descriptors(2):
        left = remove_tree(top)
    assert left == [] and list(fast_folder.iterdir()) == []


def test_no_free_descriptor_is_reported_not_raised(tmp_path):
    top = deep_tree(tmp_path, 20)
    with free_descriptors(0):
        left = remove_tree(top)
    assert len(left) == 1 and left[0].startswith(f"{top} (stopped: Too many open files")
    assert top.is_dir()
