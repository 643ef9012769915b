"""Policy snapshots: digests taken as they are written, carried by checkpoints, restored verified."""

from __future__ import annotations

import shutil

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from comlrl_lightning import HistoryComparator
from comlrl_lightning.checkpoints.assets import CheckpointAssets, asset_folder, file_digest, write_assets
from comlrl_lightning.defaults import embedded_model_path
from comlrl_lightning.rounds.replay import ReplayBuffer, ReplayIndexError
from comlrl_lightning.rounds.snapshots import PolicySnapshots
from comlrl_lightning.team.team import Team
from tests.helpers.iterative_run import make_run


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


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_doctored_snapshot_index_cannot_make_a_resume_delete_outside_the_run(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1, save_on_train_epoch_end=True
    )
    module, datamodule, trainer = make_run(
        tmp_path / "run", data=dict(comparator=HistoryComparator(k=1)), callbacks=[checkpoint], max_epochs=2
    )
    trainer.fit(module, datamodule)
    path = next((tmp_path / "ckpt").glob("epoch=1-*.ckpt"))
    state = torch.load(path, weights_only=True)
    state["callbacks"]["comlrl_lightning.data"]["snapshots"]["saved"].insert(0, "../../victim")
    torch.save(state, path)  # still weights_only-safe: only the index is doctored
    module, datamodule, trainer = make_run(tmp_path / "run", data=dict(comparator=HistoryComparator(k=1)))
    with pytest.raises(ValueError, match=r"snapshot index names '\.\./\.\./victim', which is not a policy snapshot"):
        trainer.fit(module, datamodule, ckpt_path=str(path))
    assert (victim / "precious.txt").read_text() == "keep me"


def test_snapshot_and_replay_indexes_only_name_files_of_their_own_folder(tmp_path):
    snapshots = PolicySnapshots(tmp_path / "snapshots")
    for name in ("../x", "/etc", "initial/../../x", "iteration_1"):
        with pytest.raises(ValueError, match="not a policy snapshot"):
            snapshots.load_state_dict({"saved": [name]})
    snapshots.load_state_dict({"saved": ["initial", "iteration_0003"]})  # names of this folder are fine
    replay = ReplayBuffer(tmp_path / "replay")
    shard = {"iteration": 1, "filename": "../../outside.json", "num_pairs": 1, "sha256": "0" * 64}
    with pytest.raises(
        ReplayIndexError, match=r"names '\.\./\.\./outside\.json' for iteration 1, which is not a round file"
    ):
        replay.load_state_dict({"version": 1, "directory": "x", "shards": [shard]})


def test_snapshots_and_round_files_that_are_links_leading_out_are_never_used(tmp_path):
    import hashlib

    outside = tmp_path / "outside"
    (outside / "agent_0").mkdir(parents=True)
    (outside / "agent_0" / "precious.txt").write_text("keep me")
    snapshots = PolicySnapshots(tmp_path / "snapshots")
    snapshots.directory.mkdir()
    (snapshots.directory / "initial").symlink_to(outside)
    with pytest.warns(UserWarning, match=r"snapshots/initial leads outside .*snapshots \(a link\); dropped"):
        snapshots.load_state_dict({"saved": ["initial"]})
    snapshots.prune(5)
    assert snapshots.saved == [] and (outside / "agent_0" / "precious.txt").read_text() == "keep me"
    with pytest.raises(FileNotFoundError, match="Policy snapshot .*initial is missing"):
        snapshots.require(0)
    from comlrl_lightning import Team
    from comlrl_lightning.errors import RunStateError

    with pytest.raises(RunStateError, match=r"snapshots/initial is a symbolic link; policy snapshots are folders"):
        snapshots.save(0, Team(["embedded"]))  # never written through the link
    assert sorted(p.name for p in outside.rglob("*")) == ["agent_0", "precious.txt"]
    data = b'{"iteration": 1, "num_pairs": 1, "pairs": [{}]}'
    (outside / "round.json").write_bytes(data)
    replay = ReplayBuffer(tmp_path / "replay")
    replay.directory.mkdir()
    (replay.directory / "iteration_0001.json").symlink_to(outside / "round.json")
    shard = {
        "iteration": 1,
        "filename": "iteration_0001.json",
        "num_pairs": 1,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    with pytest.raises(ReplayIndexError, match=r"iteration_0001\.json leads outside .*replay \(a link\)"):
        replay.load_state_dict({"version": 1, "directory": "x", "shards": [shard]})
