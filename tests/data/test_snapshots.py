"""Policy snapshots: digests taken as they are written, carried by checkpoints, restored verified."""

from __future__ import annotations

import shutil

import pytest

from comlrl_lightning.data.snapshots import PolicySnapshots
from comlrl_lightning.defaults import embedded_model_path
from comlrl_lightning.runtime.checkpoint_assets import CheckpointAssets, asset_folder, file_digest, write_assets
from comlrl_lightning.team.team import Team


@pytest.fixture(scope="module")
def team():
    return Team([str(embedded_model_path())] * 2)


def test_a_snapshot_index_records_every_files_digest_and_a_checkpoint_carries_them(tmp_path, team):
    snapshots = PolicySnapshots(tmp_path / "snapshots")
    snapshots.save(0, team)
    snapshots.save(1, team)
    state = snapshots.state_dict()
    assert state["saved"] == ["initial", "iteration_0000"]
    files = state["files"]["initial"]
    assert "agent_0/model.safetensors" in files and "agent_1/config.json" in files
    path = tmp_path / "snapshots" / "initial" / "agent_0" / "model.safetensors"
    assert files["agent_0/model.safetensors"] == {"sha256": file_digest(path), "size": path.stat().st_size}
    names = sorted(entry["name"] for entry in snapshots.assets())
    assert "initial/agent_0/model.safetensors" in names and "iteration_0000/agent_1/tokenizer.json" in names
    snapshots.prune(1)
    assert set(snapshots.state_dict()["files"]) == {"iteration_0000"}  # a pruned snapshot leaves the index


def test_a_resume_puts_back_missing_snapshots_and_fails_only_for_a_needed_one_it_cannot(tmp_path, team):
    snapshots = PolicySnapshots(tmp_path / "run" / "snapshots")
    for round_start in (0, 1):
        snapshots.save(round_start, team)
    state = snapshots.state_dict()
    carried = [entry for entry in snapshots.assets() if entry["name"].startswith("iteration_0000/")]
    write_assets(carried, asset_folder(tmp_path / "ckpt" / "checkpoint.ckpt"))  # only the second snapshot
    shutil.rmtree(tmp_path / "run")
    moved = PolicySnapshots(tmp_path / "elsewhere")
    moved.load_state_dict(state, CheckpointAssets.of_checkpoint(tmp_path / "ckpt" / "checkpoint.ckpt"))
    assert moved.saved == ["iteration_0000"]  # put back, verified; "initial" could not be
    restored = tmp_path / "elsewhere" / "iteration_0000" / "agent_0" / "model.safetensors"
    assert file_digest(restored) == state["files"]["iteration_0000"]["agent_0/model.safetensors"]["sha256"]
    moved.require(1)  # the snapshot a resumed run needs is there
    with pytest.raises(
        FileNotFoundError, match=r"initial is needed to resume: .*initial/agent_0/config\.json is missing"
    ):
        moved.require(0)


def test_snapshot_file_names_from_a_checkpoint_stay_inside_the_folder(tmp_path):
    from comlrl_lightning.errors import DataError

    state = {"saved": ["initial"], "files": {"initial": {"../../evil.bin": {"sha256": "0" * 64, "size": 1}}}}
    with pytest.raises(DataError, match="not a plain relative path"):
        PolicySnapshots(tmp_path).load_state_dict(state, CheckpointAssets(None))
