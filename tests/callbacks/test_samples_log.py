"""SamplesLog: every evaluation's prompts, completions and rewards as JSON lines (and a W&B table),
for any task, once per evaluation across a resume, without changing what it observes."""

from __future__ import annotations

import copy
import json
import os

import pytest

from comlrl_lightning.callbacks.samples_log import (
    SamplesLog,
    json_lines,
    rewrite_lines,
    sample_records,
    table_columns,
    table_row,
)
from comlrl_lightning.errors import ConfigurationError, RunStateError
from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples
from comlrl_lightning.tasks.task import Task
from comlrl_lightning.tasks.turns import Turns

TASK = Task(["w {prompt}", "m {prompt}"], reward_func=lambda a, b: [0.0], num_agents=2)
TWO_TURN_TASK = Task(
    ["w {prompt}", "m {prompt}"],
    reward_func=lambda a, b: [0.0],
    num_agents=2,
    turns=Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.reward_feedback"),
)


def _one_turn() -> EvaluationSamples:
    samples = EvaluationSamples()
    samples.add(
        TASK,
        [{"prompt": "sun"}, {"prompt": "moon"}, {"prompt": "sea"}],
        [["a", "b"], ["c", "d"], ["e", "f"]],
        [0.5, 1.0, -1.0],
    )
    return samples


def _two_turns() -> EvaluationSamples:
    samples = EvaluationSamples()
    samples.add(
        TWO_TURN_TASK,
        [{"prompt": "sun"}, {"prompt": "moon"}],
        [["a2", "b2"], ["c1", "d1"]],  # the last turn each trajectory reached
        [0.75, 0.25],  # the returns
        earlier_turns=[[["a1", "b1"]], []],  # item 1 stopped after turn 1
        turn_rewards=[[0.5, 0.75], [0.25]],
    )
    return samples


def test_a_one_turn_record_holds_each_agents_prompt_and_completion_and_the_reward():
    samples = _one_turn()
    kept = copy.deepcopy(samples)
    records = sample_records(samples, step=40)
    assert records[1] == {
        "step": 40,
        "item": 1,
        "prompts": ["w moon", "m moon"],
        "completions": ["c", "d"],
        "reward": 1.0,
    }
    records[0]["prompts"].append("changed")  # the records are copies: the module's samples stay as they were
    records[0]["completions"][0] = "changed"
    assert samples == kept


def test_a_multi_turn_record_holds_every_turn_each_turns_reward_and_the_return():
    first, second = sample_records(_two_turns(), step=3)
    assert first == {
        "step": 3,
        "item": 0,
        "prompts": ["w sun", "m sun"],
        "turns": [["a1", "b1"], ["a2", "b2"]],
        "turn_rewards": [0.5, 0.75],
        "return": 0.75,
    }
    assert second["turns"] == [["c1", "d1"]] and second["turn_rewards"] == [0.25] and second["return"] == 0.25


def test_records_are_numbered_by_evaluation_item_across_processes_and_capped():
    samples = _one_turn()
    assert [r["item"] for r in sample_records(samples, 0, rank=1, world=2)] == [1, 3, 5]  # rank 1 of 2: items 1, 3, 5
    assert [r["item"] for r in sample_records(samples, 0, rank=1, world=2, max_items=4)] == [1, 3]
    assert [r["item"] for r in sample_records(samples, 0, max_items=2)] == [0, 1]
    with pytest.raises(ConfigurationError, match="SamplesLog max_items must be at least 1"):
        SamplesLog(max_items=0)


def test_the_table_has_a_column_per_agent_and_turn_and_empty_cells_past_a_trajectorys_end():
    one = sample_records(_one_turn(), 0)
    columns = table_columns(one)
    assert columns == [
        "step",
        "item",
        "agent_1_prompt",
        "agent_2_prompt",
        "agent_1_completion",
        "agent_2_completion",
        "reward",
    ]
    assert table_row(one[2], columns) == [0, 2, "w sea", "m sea", "e", "f", -1.0]
    two = sample_records(_two_turns(), 0)
    columns = table_columns(two)
    assert columns[4:] == [
        "agent_1_turn_1",
        "agent_1_turn_2",
        "agent_2_turn_1",
        "agent_2_turn_2",
        "turn_1_reward",
        "turn_2_reward",
        "return",
    ]
    assert table_row(two[1], columns)[4:] == ["c1", None, "d1", None, 0.25, None, 0.25]


def test_lines_are_valid_utf8_and_a_rewrite_keeps_the_lines_asked_for(tmp_path):
    data = json_lines([{"completion": "bad \ud800 text"}, {"completion": "line\nbreak"}])
    assert data.decode("utf-8").count("\n") == 2 and "\ufffd" in data.decode("utf-8")
    path = tmp_path / "samples.jsonl"
    assert rewrite_lines(path, None, b"1\n2\n") == 2
    assert rewrite_lines(path, None, b"3\n") == 3 and path.read_bytes() == b"1\n2\n3\n"
    assert rewrite_lines(path, 1, b"") == 1 and path.read_bytes() == b"1\n"
    os.symlink(tmp_path / "elsewhere", tmp_path / "link.jsonl")
    with pytest.raises(RunStateError):
        rewrite_lines(tmp_path / "link.jsonl", None, b"x\n")


def _run(root, ckpt_path=None, callbacks=(), logger=None, **trainer_options):
    """A tiny iterative run (2 rounds of 2 epochs, 3 updates each, an evaluation every 2) with a SamplesLog."""
    from comlrl_lightning.callbacks import ResumableCSVLogger
    from tests.helpers.iterative_run import make_run

    samples = SamplesLog(max_items=3)
    logger = logger if logger is not None else ResumableCSVLogger(save_dir=str(root), version=0)
    options = {"max_epochs": 4, "logger": logger, "callbacks": [samples, *callbacks], **trainer_options}
    module, datamodule, trainer = make_run(root, data=dict(num_iterations=2), **options)
    trainer.fit(module, datamodule, ckpt_path=ckpt_path)
    return samples, module


@pytest.mark.slow  # three tiny training runs
def test_a_resumed_run_writes_each_evaluation_once_as_the_uninterrupted_run_did(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    samples, module = _run(tmp_path / "whole")
    assert samples.written == tmp_path / "whole" / "lightning_logs" / "version_0" / "evaluation_samples.jsonl"
    whole = samples.written.read_bytes()
    records = [json.loads(line) for line in whole.decode().splitlines()]
    steps = sorted({r["step"] for r in records})
    assert steps == [0, 2, 4, 6, 8, 10, 12]  # before training, every 2 updates (the last one is the final evaluation)
    assert all(sorted(r["item"] for r in records if r["step"] == s) == [0, 1, 2] for s in steps)  # max_items=3
    assert len(module.evaluated_samples.items) == 4  # the cap trims what is written, not the module's samples
    # interrupted after 7 updates (its evaluation after training written), resumed from update 5: the
    # evaluations after the checkpoint run again and are written once
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_train_steps=1)
    interrupted, _ = _run(tmp_path / "resumed", callbacks=[checkpoint], max_steps=7)
    assert b'"step": 7' in interrupted.written.read_bytes()
    resumed, _ = _run(tmp_path / "resumed", ckpt_path=str(next((tmp_path / "ckpt").glob("*step=5.ckpt"))))
    assert resumed.written == interrupted.written and resumed.written.read_bytes() == whole


@pytest.mark.slow  # a tiny training run with an offline W&B run
def test_with_a_wandb_logger_every_evaluation_is_a_table_too(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(project="samples", save_dir=str(tmp_path), offline=True)
    samples, _ = _run(tmp_path, logger=logger, max_epochs=1)
    logger.experiment.finish()
    tables = sorted(tmp_path.rglob("samples_*.table.json"))
    lines = samples.written.read_text().splitlines()
    assert tables and len(tables) == len({json.loads(line)["step"] for line in lines})  # one table per evaluation
    table = json.loads(tables[0].read_text())
    assert table["columns"] == table_columns([json.loads(lines[0])])
    assert len(table["data"]) == 3  # max_items=3 of the 4 evaluation items
