"""Which run and line a checkpoint belongs to, and folder resumes that refuse a folder of several."""

from __future__ import annotations

import pytest

from comlrl_lightning.checkpoints.lineage import Lineage, SeveralLinesError, lineage_of, on_line
from comlrl_lightning.checkpoints.metadata import newest_checkpoint
from tests.checkpoints.test_metadata import RUN_ID, fake_checkpoint, record

OTHER_RUN = "f" * 32
FIRST, SECOND, THIRD = "a" * 32, "b" * 32, "c" * 32


def line(branch: str, forks=(), run_id: str = RUN_ID) -> dict:
    return record(run_id=run_id, branch=branch, forks=[list(fork) for fork in forks])


def test_a_checkpoint_is_on_the_line_of_its_branch_and_of_the_branches_it_forked_from():
    head = Lineage(RUN_ID, SECOND, ((FIRST, (2, 4, 0)),))  # resumed from the first part at epoch 2
    assert on_line(Lineage(RUN_ID, FIRST), (1, 2, 0), head, (3, 6, 0))  # before the fork
    assert on_line(Lineage(RUN_ID, FIRST), (2, 4, 0), head, (3, 6, 0))  # the fork itself
    assert not on_line(Lineage(RUN_ID, FIRST), (3, 6, 0), head, (3, 6, 0))  # the first part went on: another line
    assert on_line(Lineage(RUN_ID, SECOND), (3, 6, 0), head, (3, 6, 0))
    assert not on_line(Lineage(OTHER_RUN, SECOND), (1, 2, 0), head, (3, 6, 0))  # another run
    assert not on_line(Lineage(RUN_ID, THIRD), (1, 2, 0), head, (3, 6, 0))


def test_a_malformed_lineage_counts_as_a_record_without_branches():
    assert lineage_of({"comlrl_lightning.checkpoint": line(FIRST)}) == Lineage(RUN_ID, FIRST, ())
    assert lineage_of({"comlrl_lightning.checkpoint": dict(line(FIRST), forks=[["x", 1, 2, 3]])}).branch is None
    assert lineage_of({"comlrl_lightning.checkpoint": dict(line(FIRST), forks="abc")}).forks == ()
    assert lineage_of({"comlrl_lightning.checkpoint": record(run_id=None)}) is None


def test_a_folder_of_one_line_resumes_its_newest(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-1" / "checkpoint.ckpt", 1, 2, record=line(FIRST))
    fake_checkpoint(tmp_path / "checkpoint-2" / "checkpoint.ckpt", 2, 4, record=line(FIRST))
    newest = fake_checkpoint(
        tmp_path / "checkpoint-3" / "checkpoint.ckpt", 3, 6, record=line(SECOND, [(FIRST, 2, 4, 0)])
    )
    fake_checkpoint(tmp_path / "plain.ckpt", 1, 1)  # no run record: says nothing about its run
    assert newest_checkpoint(tmp_path) == newest


def test_a_folder_of_two_runs_is_refused_with_the_list(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-1" / "checkpoint.ckpt", 1, 2, record=line(FIRST))
    fake_checkpoint(tmp_path / "checkpoint-2" / "checkpoint.ckpt", 2, 4, record=line(SECOND, run_id=OTHER_RUN))
    with pytest.raises(SeveralLinesError, match=r"holds checkpoints of 2 runs.*checkpoint-2.*checkpoint-1.*Pass the"):
        newest_checkpoint(tmp_path)


def test_a_folder_with_a_branch_from_an_older_checkpoint_is_refused_with_both_lines(tmp_path):
    for number in (1, 2, 3):  # the first part: three commits
        fake_checkpoint(tmp_path / f"checkpoint-{number}" / "checkpoint.ckpt", number, 2 * number, record=line(FIRST))
    # a resume from checkpoint-1 wrote checkpoint-2 again, and stopped there
    fake_checkpoint(tmp_path / "checkpoint-2" / "checkpoint.ckpt", 2, 4, record=line(SECOND, [(FIRST, 1, 2, 0)]))
    with pytest.raises(SeveralLinesError, match=r"several lines of one run.*checkpoint-3/.*checkpoint-2/"):
        newest_checkpoint(tmp_path)
