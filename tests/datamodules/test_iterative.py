"""Iterative MADPO: rounds as epochs, round files, replay, history comparator, exact resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from comlrl_lightning import (
    CurrentComparator,
    CurrentReplay,
    HistoryComparator,
    IterativePreferenceDataModule,
    LambdaDecayReplay,
    MADPOModule,
    OptionError,
)
from comlrl_lightning.defaults import toy_items, vowel_length_reward
from tests.conftest import tiny_task
from tests.helpers.forks import account, run_forked
from tests.helpers.iterative_run import ITER_MODEL, iter_data, killed_run, make_run, make_trainer


def _weights(module):
    return {k: v.detach().clone() for k, v in module.team.state_dict().items()}


def _round_files(root):
    return {p.name: p.read_bytes() for p in sorted((Path(root) / "preference_replay").glob("iteration_*.json"))}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted")
    module, datamodule, trainer = make_run(root)
    trainer.fit(module, datamodule)
    return dict(
        root=root,
        weights=_weights(module),
        files=_round_files(root),
        step=trainer.global_step,
        last_sample=[p.to_record() for p in datamodule.pairs],
        datamodule=datamodule,
    )


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_every_round_writes_its_file_and_trains_on_its_replay_sample(uninterrupted):
    files = uninterrupted["files"]
    assert sorted(files) == ["iteration_0001.json", "iteration_0002.json", "iteration_0003.json"]
    for index, name in enumerate(sorted(files), start=1):
        payload = json.loads(files[name])
        assert list(payload) == ["iteration", "num_pairs", "pairs"]
        assert payload["iteration"] == index and payload["num_pairs"] == len(payload["pairs"]) > 0
        record = payload["pairs"][0]
        assert len(record["raw_rewards"]) == 2 and record["target_raw_reward"] is not None
        assert record["comparator_raw_reward"] is not None
    assert len(uninterrupted["last_sample"]) == 24  # preference_replay_sample_size
    assert uninterrupted["step"] == 3 * 2 * 3  # rounds x epochs x batches of 8 out of 24
    assert not list((uninterrupted["root"] / "preference_replay").glob("*.tmp"))


@pytest.mark.parametrize(
    "inference_mode",
    [True, pytest.param(False, marks=pytest.mark.slow)],
    ids=["default-trainer", "no-inference-mode"],
)
@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_validation_on_another_trainer_before_fit_changes_nothing(uninterrupted, tmp_path, inference_mode):
    """A baseline first: ``Trainer().validate`` then a new plain ``Trainer().fit`` (which sets no
    dataloader reload of its own) collects every round, snapshots included, exactly as a run that
    never validated: no round retrains round 1's pairs, and metric states made in inference mode
    do not break fit's evaluations."""
    from lightning.pytorch import Trainer

    module, datamodule, trainer = make_run(tmp_path, reload_dataloaders_every_n_epochs=0)
    plain = dict(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False, logger=False)
    results = Trainer(default_root_dir=str(tmp_path), inference_mode=inference_mode, **plain).validate(
        module, datamodule, verbose=False
    )
    assert "eval/turn_1/reward_mean" in results[0]
    assert trainer.reload_dataloaders_every_n_epochs == 0  # the user's Trainer, as given
    trainer.fit(module, datamodule)
    assert trainer.reload_dataloaders_every_n_epochs == 0  # still: the data module follows the epochs itself
    assert _round_files(tmp_path) == uninterrupted["files"]
    snapshots = sorted(p.name for p in (tmp_path / "policy_snapshots").iterdir())
    assert snapshots == sorted(p.name for p in (uninterrupted["root"] / "policy_snapshots").iterdir())
    assert "iteration_0001" in snapshots  # the round-2 policy, saved for round 3's comparator
    assert trainer.global_step == uninterrupted["step"]
    weights = _weights(module)
    for key, value in uninterrupted["weights"].items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0)


@pytest.mark.parametrize(
    "checkpoint_options, stop, pick",
    [
        (dict(every_n_epochs=1, save_on_train_epoch_end=True), dict(max_epochs=2), "epoch=1-step=6.ckpt"),
        (dict(every_n_train_steps=1), dict(max_steps=8), "epoch=2-step=8.ckpt"),  # inside round 2
    ],
    ids=["after-a-round", "mid-round"],
)
@pytest.mark.parametrize("reload", [1, 0], ids=["reloading-trainer", "plain-trainer"])
@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_resumed_run_equals_uninterrupted_run(uninterrupted, tmp_path, checkpoint_options, stop, pick, reload):
    """Also under a plain ``Trainer()`` (no dataloader reload: the data module follows the epochs
    itself), whose first batch after a resume is drawn before Lightning moves ``current_epoch`` on."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, **checkpoint_options)
    plain = dict(reload_dataloaders_every_n_epochs=reload)
    module, datamodule, trainer = make_run(tmp_path, callbacks=[checkpoint], **stop, **plain)
    trainer.fit(module, datamodule)
    path = tmp_path / "ckpt" / pick
    assert path.exists(), sorted(p.name for p in (tmp_path / "ckpt").iterdir())

    module, datamodule, trainer = make_run(tmp_path, **plain)
    trainer.fit(module, datamodule, ckpt_path=str(path))
    assert _round_files(tmp_path) == uninterrupted["files"]
    assert [p.to_record() for p in datamodule.pairs] == uninterrupted["last_sample"]
    assert trainer.global_step == uninterrupted["step"]
    weights = _weights(module)
    for key, value in uninterrupted["weights"].items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("kill_where", ["collection", "write"])
def test_sigkill_in_a_round_leaves_no_trusted_file_and_the_resume_redoes_the_round(uninterrupted, tmp_path, kill_where):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # the process's output, beside the run it wrote
    assert run_forked(killed_run, str(tmp_path), kill_where, log=log) == -9, account(log)
    replay = tmp_path / "preference_replay"
    assert not (replay / "iteration_0002.json").exists()  # never under its final name half-written
    if kill_where == "write":
        assert (replay / "iteration_0002.json.tmp").exists()
    module, datamodule, trainer = make_run(tmp_path)
    trainer.fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "epoch=1-step=6.ckpt"))
    assert _round_files(tmp_path) == uninterrupted["files"]
    weights = _weights(module)
    for key, value in uninterrupted["weights"].items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0)


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_resume_fails_at_once_naming_a_missing_or_corrupt_round_file(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1, save_on_train_epoch_end=True
    )
    module, datamodule, trainer = make_run(tmp_path, callbacks=[checkpoint], max_epochs=2)
    trainer.fit(module, datamodule)
    round_file = tmp_path / "preference_replay" / "iteration_0001.json"
    copy = tmp_path / "ckpt" / "epoch=1-step=6.assets" / "preference_replay" / "iteration_0001.json"
    assert os.stat(copy).st_ino != os.stat(round_file).st_ino  # the checkpoint's copy is a file of its own
    for path in (round_file, copy):  # an edit in place of the live file alone would be restored from the copy
        path.write_bytes(path.read_bytes()[:50])
    module, datamodule, trainer = make_run(tmp_path)
    with pytest.raises(Exception, match="iteration_0001.json"):
        trainer.fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "epoch=1-step=6.ckpt"))
    round_file.unlink()
    module, datamodule, trainer = make_run(tmp_path)
    with pytest.raises(Exception, match="iteration_0001.json"):
        trainer.fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "epoch=1-step=6.ckpt"))


@pytest.mark.slow  # trains long for the everyday tier
def test_raising_num_iterations_extends_a_finished_run(uninterrupted, tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    module, datamodule, trainer = make_run(tmp_path, callbacks=[checkpoint])
    trainer.fit(module, datamodule)
    module, datamodule, trainer = make_run(tmp_path, data=dict(num_iterations=4), max_epochs=8)
    trainer.fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    files = _round_files(tmp_path)
    assert sorted(files) == [f"iteration_{i:04d}.json" for i in range(1, 5)]
    assert {k: files[k] for k in uninterrupted["files"]} == uninterrupted["files"]
    assert trainer.global_step == uninterrupted["step"] + 2 * 3


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_old_files_in_the_replay_folder_are_never_imported(tmp_path):
    replay = tmp_path / "preference_replay"
    replay.mkdir()
    (replay / "iteration_0007.json").write_text('{"iteration": 7, "num_pairs": 1, "pairs": [{"prompts": ["x"]}]}')
    module, datamodule, trainer = make_run(tmp_path, data=dict(num_iterations=1), max_epochs=2)
    trainer.fit(module, datamodule)
    assert [shard.iteration for shard in datamodule.replay.shards] == [1]
    assert datamodule.replay.total_pairs == json.loads((replay / "iteration_0001.json").read_text())["num_pairs"]


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_history_comparator_with_k1_uses_the_previous_rounds_policy(tmp_path):
    module, datamodule, trainer = make_run(tmp_path, data=dict(num_iterations=3))
    seen = {}
    original = datamodule.build_round

    def spy(round_index, module_):
        comparator = datamodule.comparator
        end_round = comparator.end_round

        def seen_before_release():  # the snapshot's models leave memory when the round's collection ends
            seen[round_index] = (
                comparator.snapshot_round(round_index),
                {k: v.clone() for k, v in comparator.source().agents[0].state_dict().items()},
                {k: v.detach().clone() for k, v in module_.team.agents[0].state_dict().items()},
            )
            end_round()

        comparator.end_round = seen_before_release
        try:
            original(round_index, module_)
        finally:
            comparator.end_round = end_round
        with pytest.raises(RuntimeError, match="loads the snapshot before sampling"):
            comparator.source()  # released: not held through training

    datamodule.build_round = spy
    trainer.fit(module, datamodule)
    assert [seen[r][0] for r in range(3)] == [0, 0, 1]
    # round 0 compares against the initial policy (= current weights); later rounds against older weights
    assert all(torch.equal(seen[0][1][k], seen[0][2][k]) for k in seen[0][1])
    for r in (1, 2):
        assert any(not torch.equal(seen[r][1][k], seen[r][2][k]) for k in seen[r][1])
    # round 2's comparator is the policy at the start of round 1
    assert all(torch.equal(seen[2][1][k], seen[1][2][k]) for k in seen[2][1])
    # unreachable snapshots are pruned (the default folder is ours), keeping one extra round for resumes
    assert sorted(p.name for p in (tmp_path / "policy_snapshots").iterdir()) == [
        ".lock",
        "iteration_0000",
        "iteration_0001",
    ]


ITER_RULES = [
    (dict(num_iterations=0), "num_iterations must be >= 1."),
    (dict(pair_selection="best"), "pair_selection must be one of: reward_gap, all, random, comparator_reward."),
    (dict(preference_num_candidates=1), "preference_num_candidates must be >= 2."),
]


@pytest.mark.parametrize("options, message", ITER_RULES)
def test_iterative_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        IterativePreferenceDataModule(**options)
    assert message in str(error.value)


def test_iterative_defaults():
    data = IterativePreferenceDataModule()
    assert isinstance(data.comparator, CurrentComparator) and data.comparator.num_candidates is None
    assert isinstance(data.replay_rule, CurrentReplay)
    assert (
        data.num_iterations,
        data.num_train_epochs,
        data.preference_num_candidates,
        data.preference_pairs_per_sample,
        data.pair_selection,
    ) == (6, 1, 20, 4, "comparator_reward")
    # every data module gets its own default parts (a comparator is bound to one data module)
    assert IterativePreferenceDataModule().comparator is not data.comparator


def test_the_constructor_stays_small():
    import inspect

    assert len(inspect.signature(IterativePreferenceDataModule.__init__).parameters) - 1 <= 15


class TiedRounds(IterativePreferenceDataModule):
    """Every candidate of the rounds in ``tied`` gets the same reward: those rounds build no pair."""

    def __init__(self, tied, **options):
        super().__init__(**options)
        self.tied, self.reward = tied, None

    def build_round(self, round_index, module):
        self.reward = self.reward or self.task.oracle.reward_func
        tie = lambda *texts, **_: [0.0] * len(texts[0])  # noqa: E731
        self.task.oracle.reward_func = tie if round_index in self.tied else self.reward
        super().build_round(round_index, module)


def _tied_run(root, tied, reload=1, **trainer_options):
    module = MADPOModule(**ITER_MODEL)
    options = iter_data(comparator=CurrentComparator(), replay=CurrentReplay(), num_train_epochs=1)
    trainer = make_trainer(root, **{"max_epochs": 3, "reload_dataloaders_every_n_epochs": reload, **trainer_options})
    return module, TiedRounds(tied, **options), trainer


@pytest.mark.parametrize(
    "tied, reload",
    [
        pytest.param({0}, 1, id="first-round-reloading-trainer"),
        pytest.param({1}, 1, id="middle-round-reloading-trainer", marks=pytest.mark.slow),
        pytest.param({0}, 0, id="first-round-plain-trainer", marks=pytest.mark.slow),
        pytest.param({1}, 0, id="middle-round-plain-trainer", marks=pytest.mark.slow),
    ],
)
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_round_without_pairs_trains_nothing_and_the_run_goes_on(tmp_path, tied, reload):
    """Lightning ends ``fit`` at a training loader of length 0: the empty round must not end the run."""
    module, datamodule, trainer = _tied_run(tmp_path, tied, reload)
    trainer.fit(module, datamodule)
    counts = [json.loads(text)["num_pairs"] for text in _round_files(tmp_path).values()]
    assert [count == 0 for count in counts] == [r in tied for r in range(3)]
    assert trainer.current_epoch == 3 and datamodule.built_round == 2
    assert trainer.global_step == sum(-(-count // 8) for count in counts)  # batches of 8, the empty round none


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_resume_after_a_round_without_pairs_equals_the_uninterrupted_run(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    module, datamodule, trainer = _tied_run(tmp_path / "whole", {1})
    trainer.fit(module, datamodule)
    whole = _weights(module), _round_files(tmp_path / "whole"), trainer.global_step
    # mid-round 3: an epoch without batches adds no step, so Lightning writes no checkpoint after it
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_train_steps=1)
    module, datamodule, trainer = _tied_run(tmp_path / "parts", {1}, callbacks=[checkpoint], max_steps=whole[2] - 2)
    trainer.fit(module, datamodule)
    path = tmp_path / "ckpt" / f"epoch=2-step={whole[2] - 2}.ckpt"
    module, datamodule, trainer = _tied_run(tmp_path / "parts", {1})
    trainer.fit(module, datamodule, ckpt_path=str(path))
    assert (_round_files(tmp_path / "parts"), trainer.global_step) == whole[1:]
    for key, value in whole[0].items():
        torch.testing.assert_close(_weights(module)[key], value, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# The round logic in the everyday tier: the data module's own methods on a team that a validation
# attached to a Trainer (no fit, no training step, no process), 4 items, a round in under a second


FOUR_ITEMS = toy_items(4)


def _attached(root, **data):
    """(module, datamodule) attached to a Trainer by a validation without batches: ``epoch_loader``
    then collects a round as ``fit`` would at that epoch, without training between rounds."""
    task = tiny_task(train_dataset=FOUR_ITEMS, eval_dataset=FOUR_ITEMS, reward_func=vowel_length_reward)
    options = dict(task=task, preference_num_candidates=2, comparator=CurrentComparator(num_candidates=2))
    module, datamodule, trainer = make_run(root, data={**options, **data}, limit_val_batches=0)
    trainer.validate(module, datamodule, verbose=False)
    return module, datamodule


def _round_records(root):
    return [json.loads(text)["pairs"] for text in _round_files(root).values()]


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """Three rounds of two epochs with a lambda-decay replay of 24, recorded epoch by epoch; the
    data module's state after round 2; its folders released for a resume in the same root."""
    root = tmp_path_factory.mktemp("rounds")
    module, datamodule = _attached(root, replay=LambdaDecayReplay(lam=0.5, sample_size=24))
    epochs = []
    for epoch in range(6):
        datamodule.epoch_loader(epoch)
        built, collection = datamodule.round_collection()
        epochs.append(dict(built=built, collection=collection, files=_round_files(root), pairs=list(datamodule.pairs)))
        if epoch == 3:
            state = datamodule.data_state_dict()
    datamodule.release_folders()
    return dict(root=root, epochs=epochs, state=state, team=module.team)


def test_a_round_is_collected_at_the_first_epoch_of_each_round_and_only_then(rounds):
    epochs = rounds["epochs"]
    assert [epoch["built"] for epoch in epochs] == [0, 0, 1, 1, 2, 2]  # num_train_epochs=2
    assert [len(epoch["files"]) for epoch in epochs] == [1, 1, 2, 2, 3, 3]
    for first, second in zip(epochs[::2], epochs[1::2]):  # the round's second epoch collects nothing
        assert second["collection"] is first["collection"] and second["files"] == first["files"]
        assert [p.to_record() for p in second["pairs"]] == [p.to_record() for p in first["pairs"]]
    assert len({id(epoch["collection"]) for epoch in epochs}) == 3


def test_a_rounds_file_holds_exactly_the_pairs_its_collection_built(rounds):
    files = rounds["epochs"][-1]["files"]
    assert sorted(files) == ["iteration_0001.json", "iteration_0002.json", "iteration_0003.json"]
    for index, name in enumerate(sorted(files)):
        payload = json.loads(files[name])
        records = json.loads(json.dumps([p.to_record() for p in rounds["epochs"][2 * index]["collection"].pairs]))
        assert payload == {"iteration": index + 1, "num_pairs": len(records), "pairs": records}
        assert records and all(r["winner_reward"] > r["loser_reward"] for r in records)  # ties are dropped
        assert all(r["target_raw_reward"] is not None and r["comparator_raw_reward"] is not None for r in records)
    assert not list((rounds["root"] / "preference_replay").glob("*.tmp"))


def test_replay_draws_each_rounds_training_pairs_from_every_round_written_so_far(rounds):
    written = _round_records(rounds["root"])
    as_json = lambda records: [json.dumps(r, sort_keys=True) for r in records]  # noqa: E731
    for round_index in range(3):
        training = as_json(json.loads(json.dumps([p.to_record() for p in rounds["epochs"][2 * round_index]["pairs"]])))
        assert len(training) == 24  # the rule's sample_size, more than any round's pair count: drawn with repeats
        origins = [{r for r in range(round_index + 1) if record in as_json(written[r])} for record in training]
        assert all(origins), "a training pair that no round file written so far holds"
        if round_index:  # lam=0.5 weighs the older rounds too: 24 draws take pairs of more than one round
            assert len(set().union(*origins)) > 1


def test_the_current_replay_trains_on_the_rounds_own_pairs(tmp_path):
    module, datamodule = _attached(tmp_path, num_iterations=2, num_train_epochs=1, replay=CurrentReplay())
    for epoch in range(2):
        datamodule.epoch_loader(epoch)
        assert datamodule.pairs == datamodule.round_collection()[1].pairs  # this round's, in collection order
        assert json.loads(json.dumps([p.to_record() for p in datamodule.pairs])) == _round_records(tmp_path)[epoch]
    datamodule.release_folders()


def test_a_restored_state_continues_the_run_exactly_without_collecting_its_round_again(rounds):
    root, state = rounds["root"], rounds["state"]
    assert state["built_round"] == 1 and state["replay"] is not None
    module, datamodule = _attached(root, replay=LambdaDecayReplay(lam=0.5, sample_size=24))
    datamodule.load_data_state_dict(state)
    before = (root / "preference_replay" / "iteration_0002.json").stat().st_mtime_ns
    datamodule.epoch_loader(3)  # the restored round's second epoch: its pairs, not a new collection
    assert datamodule.round_collection() == (None, None)
    assert [p.to_record() for p in datamodule.pairs] == [p.to_record() for p in rounds["epochs"][3]["pairs"]]
    assert (root / "preference_replay" / "iteration_0002.json").stat().st_mtime_ns == before
    datamodule.epoch_loader(4)  # the next round: the same file and the same replay draw as the run that went on
    assert _round_files(root) == rounds["epochs"][4]["files"]
    assert [p.to_record() for p in datamodule.pairs] == [p.to_record() for p in rounds["epochs"][4]["pairs"]]
    datamodule.release_folders()


def test_the_history_comparator_compares_with_the_policy_of_k_rounds_before(tmp_path):
    module, datamodule = _attached(tmp_path, num_train_epochs=1, comparator=HistoryComparator(k=1, num_candidates=2))
    comparator, started = datamodule.comparator, []
    agent_0 = lambda weights: {k[len("agents.0.") :]: v for k, v in weights.items() if k.startswith("agents.0.")}  # noqa: E731
    for round_index in range(3):
        with torch.no_grad():  # a step of "training" between rounds: each round starts from other weights
            next(module.team.agents[0].parameters()).add_(0.5)
        started.append(agent_0(_weights(module)))
        datamodule.epoch_loader(round_index)
        comparator.start_round(round_index)  # loads the snapshot the round compared with (still kept)
        try:
            loaded = comparator.source().agents[0].state_dict()
        finally:
            comparator.end_round()
        expected = started[max(round_index - 1, 0)]  # k=1: the policy at the start of the round before
        assert expected and all(torch.equal(loaded[k], expected[k]) for k in expected), round_index
        if round_index:  # not the current policy
            assert any(not torch.equal(loaded[k], started[-1][k]) for k in expected)
    assert [comparator.snapshot_round(r) for r in range(3)] == [0, 0, 1]
    datamodule.release_folders()
