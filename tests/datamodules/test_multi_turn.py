"""Multi-turn MADPO through the data modules: trajectories collected, paired, written, replayed, resumed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from comlrl_lightning import (
    CentralizedComparator,
    CurrentComparator,
    LambdaDecayReplay,
    MADPOModule,
    MARLHFModule,
    PreferenceDataModule,
)
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.rounds.trajectory_pairs import TrajectoryPair
from comlrl_lightning.tasks.turns import TransitionError, Turns
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_task, tiny_trainer
from tests.helpers.iterative_run import make_run

FEEDBACK = "tests.helpers.turn_helpers.reward_feedback"
TWO_TURNS = Turns(num_turns=2, external_transition=FEEDBACK)


def _records(root, name="iteration_0001.json"):
    return json.loads((Path(root) / "preference_replay" / name).read_text())["pairs"]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_base_madpo_trains_on_two_turn_trajectories_and_evaluates_every_turn(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    module = MADPOModule(**TINY_MODEL)
    data = PreferenceDataModule(**{**TINY_DATA, "task": tiny_task(turns=TWO_TURNS), "num_train_epochs": 1})
    logger = CSVLogger(str(tmp_path))
    trainer = tiny_trainer(tmp_path, max_epochs=1, logger=logger, val_check_interval=2, log_every_n_steps=1)
    trainer.fit(module, data)
    assert data.pairs and all(isinstance(pair, TrajectoryPair) for pair in data.pairs)
    pair = data.pairs[0]
    assert len(pair.winner_turns.rewards) == 2 and pair.winner_reward == pair.winner_turns.rewards[-1]
    assert pair.winner_turns.prompts[0][1].startswith(
        pair.prompts[0] + pair.winner_completions[0] + "\n\nturn 0 scored"
    )
    assert trainer.global_step == -(-len(data.pairs) // TINY_DATA["train_batch_size"])
    rows = list(csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))))
    evaluated = [row for row in rows if row.get("eval/turn_2/reward_mean")]
    assert len(evaluated) >= 2  # before training, every 2 updates
    for row in evaluated:
        assert row["eval/turn_1/reward_mean"] and row["eval/turn_1/expected_return"]
    trained = [row for row in rows if row.get("train/loss")]
    assert trained and all(row["turn_1/reward_mean"] and row["turn_2/reward_mean"] for row in trained)
    # training logs each turn's own reward: turn 1's differs from the return (turn 2's reward) here
    means = [pair.candidate_turn_reward_means for pair in data.pairs]
    assert all(len(m) == 2 for m in means) and any(m[0] != m[1] for m in means)
    assert {round(float(row["turn_1/expected_return"]), 5) for row in trained} != {
        round(float(row["turn_1/reward_mean"]), 5) for row in trained
    }
    final = evaluated[-1]
    # one turn-2 trajectory per item, no early stop: the return is the last turn's reward
    assert float(final["eval/turn_1/expected_return"]) == pytest.approx(float(final["eval/turn_2/reward_mean"]))


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_iterative_round_files_hold_every_agents_turns_and_replay_retokenizes_them(tmp_path):
    data = dict(task=tiny_task(turns=TWO_TURNS), num_iterations=2, replay=LambdaDecayReplay(lam=0.5, sample_size=8))
    module, datamodule, trainer = make_run(tmp_path, data=data, max_epochs=2, val_check_interval=100)
    trainer.fit(module, datamodule)
    record = _records(tmp_path)[0]
    assert list(record)[-5:] == [
        "winner_turns",
        "loser_turns",
        "winner_turn_rewards",
        "loser_turn_rewards",
        "candidate_turn_reward_means",
    ]
    assert len(record["candidate_turn_reward_means"]) == 2
    assert len(record["winner_turns"]) == 2 and len(record["winner_turns"][0]["completions"]) == 2
    assert record["winner_turns"][0]["prompts"][0] == record["prompts"][0]
    assert record["winner_reward"] == record["winner_turn_rewards"][-1]
    replayed = datamodule.pairs  # round 2's training pairs: drawn from both round files, re-tokenized
    assert len(replayed) == 8 and all(isinstance(pair, TrajectoryPair) for pair in replayed)
    tokenizer = module.team.tokenizers[0]
    for pair in replayed:
        for prompt, ids in zip(pair.winner_turns.prompts[0], pair.winner_turns.prompt_ids[0]):
            assert tokenizer.decode(ids) == prompt


def test_a_bad_transition_stops_the_round_before_its_file_is_written(tmp_path):
    turns = Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.not_text")
    module, datamodule, trainer = make_run(tmp_path, data=dict(task=tiny_task(turns=turns)))
    with pytest.raises(TransitionError, match=r"not_text \(item 0, after turn 0\) returned a int for agent 1"):
        trainer.fit(module, datamodule)
    assert not list((tmp_path / "preference_replay").glob("iteration_*"))


def test_marlhf_and_centralized_comparators_refuse_more_than_one_turn(tmp_path):
    data = PreferenceDataModule(**{**TINY_DATA, "task": tiny_task(turns=TWO_TURNS)})
    trainer = tiny_trainer(tmp_path)
    with pytest.raises(ConfigurationError, match="num_turns=2: MARLHFModule trains on task items"):
        trainer.fit(MARLHFModule(**TINY_MODEL), data)
    comparator = CentralizedComparator(CurrentComparator())
    module, datamodule, trainer = make_run(tmp_path, data=dict(task=tiny_task(turns=TWO_TURNS), comparator=comparator))
    with pytest.raises(ConfigurationError, match="centralized comparator generation .* is single-turn only"):
        trainer.fit(module, datamodule)


@pytest.mark.slow  # trains, stops inside round 2 and resumes
def test_a_run_resumed_in_the_middle_of_a_multi_turn_round_equals_the_uninterrupted_run(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    def run(root, ckpt_path=None, **trainer_options):
        data = dict(task=tiny_task(turns=TWO_TURNS))
        module, datamodule, trainer = make_run(root, data=data, **trainer_options)
        trainer.fit(module, datamodule, ckpt_path=ckpt_path)
        files = {p.name: p.read_bytes() for p in sorted((root / "preference_replay").glob("iteration_*.json"))}
        return module, datamodule, trainer, files

    whole, whole_data, whole_trainer, whole_files = run(tmp_path / "whole")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_train_steps=1)
    run(tmp_path / "resumed", callbacks=[checkpoint], max_steps=8)
    path = tmp_path / "ckpt" / "epoch=2-step=8.ckpt"  # inside round 2 (3 batches per epoch, 2 epochs per round)
    module, datamodule, trainer, files = run(tmp_path / "resumed", ckpt_path=str(path))
    assert files == whole_files and len(files) == 3
    assert [p.to_record() for p in datamodule.pairs] == [p.to_record() for p in whole_data.pairs]
    assert trainer.global_step == whole_trainer.global_step
    weights = module.team.state_dict()
    for key, value in whole.team.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0)


def test_agents_sharded_across_processes_refuse_more_than_one_turn():
    from types import SimpleNamespace

    from comlrl_lightning.datamodules.multi_turn import check_multi_turn

    task = tiny_task(turns=TWO_TURNS).build(2)
    module = SimpleNamespace(trains_on="pairs")
    check_multi_turn(task, module)  # a decentralized MADPO team in one process (or DDP): fine
    with pytest.raises(ConfigurationError, match="sharded across processes"):
        check_multi_turn(task, module, sharded=True)
    check_multi_turn(tiny_task().build(2), SimpleNamespace(trains_on="items"), sharded=True)  # one turn: anything


@pytest.mark.slow  # seconds, not milliseconds: a round trains
def test_a_turn_message_past_the_context_ends_the_trajectories_and_the_iterative_run_goes_on(tmp_path):
    long_turns = Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.too_long_for_agent_0")
    data = dict(task=tiny_task(turns=long_turns), num_iterations=1)
    module, datamodule, trainer = make_run(tmp_path, data=data, max_epochs=1, val_check_interval=100)
    with pytest.warns(UserWarning, match=r"trajectories end before turn 2 of 2: .* more than the model's context"):
        trainer.fit(module, datamodule)  # both sides of the round and the evaluation: no IndexError
    records = _records(tmp_path)
    assert records and all(len(record["winner_turn_rewards"]) == 1 for record in records)
