"""TaskDataModule: which items train and which evaluate, from the modules, the seed API and the command line."""

from __future__ import annotations

import json
import logging

import pytest

from comlrl_lightning import TaskDataModule, TaskOptions
from comlrl_lightning.cli import main, run_cli
from comlrl_lightning.errors import ConfigurationError
from tests.helpers.unloaded_fit import fit_without_a_model

ROWS = [{"prompt": "abcdefghijklmnopqrst"[: 2 + index % 7]} for index in range(20)]
REWARD = "comlrl_lightning.defaults.vowel_length_reward"


def test_held_out_evaluates_on_items_training_never_sees_and_says_so_first(caplog):
    data = TaskDataModule(
        task=TaskOptions(train_dataset=ROWS, eval_dataset="held_out", held_out_size=4, reward_func=REWARD)
    )
    with caplog.at_level(logging.INFO):
        data.setup("fit")
    assert len(data.eval_items) == 4 and len(data.train_items) == 16
    assert not set(map(id, data.eval_items)) & set(map(id, data.train_items))
    assert set(map(id, [*data.train_items, *data.eval_items])) == set(map(id, ROWS))
    assert data.evaluation_items() == list(data.eval_items)  # eval_num_samples 4: every held-out item
    assert (
        "eval_dataset: held_out: 4 of train_dataset's 20 items held out for evaluation "
        "(held_out_size=4, held_out_seed=0); 16 train"
    ) in caplog.text


def test_ones_own_training_data_never_evaluates_on_the_toy_topics():
    data = TaskDataModule(task=TaskOptions(train_dataset=ROWS, eval_dataset="embedded", reward_func=REWARD))
    with pytest.raises(ConfigurationError, match=r"^eval_dataset: 'embedded' is the toy task's 32 topics"):
        data.setup("fit")
    # no eval_dataset: no evaluation, never the toy's
    data = TaskDataModule(task=TaskOptions(train_dataset=ROWS, reward_func=REWARD))
    data.setup("fit")
    assert data.evaluation_items() == [] and len(data.train_items) == 20


@pytest.mark.slow  # builds the seed API's trainer (the embedded model) and evaluates
def test_the_seed_api_holds_items_out_or_refuses_the_toy_topics():
    from comlrl_lightning.defaults import EMBEDDED, vowel_length_reward
    from comlrl_lightning.trainers.configs import MADPOConfig
    from comlrl_lightning.trainers.preference import MADPOTrainer

    args = MADPOConfig(num_train_epochs=1, max_new_tokens=4, preference_num_candidates=2, eval_num_samples=2)
    common = dict(agent_model=EMBEDDED, train_dataset=ROWS, reward_func=vowel_length_reward, args=args)
    trainer = MADPOTrainer(**common, eval_dataset="held_out")
    metrics = trainer.evaluate()
    data = trainer.datamodule
    assert len(data.eval_items) == 2 and len(data.train_items) == 18  # 10% of 20
    assert not set(map(id, data.eval_items)) & set(map(id, data.train_items))
    assert "eval/turn_1/reward_mean" in metrics
    with pytest.raises(ConfigurationError, match=r"^eval_dataset: 'embedded' is the toy task's 32 topics"):
        MADPOTrainer(**common, eval_dataset="embedded").evaluate()


@pytest.mark.slow  # the command line builds the embedded team before its data module loads the items
def test_the_command_line_refuses_the_configs_toy_evaluation_beside_ones_own_training_file(tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "--config",
                "configs/madpo.yaml",
                "--trainer.default_root_dir",
                str(tmp_path),
                "--data.init_args.task.train_dataset",
                str(path),
            ]
        )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: eval_dataset: 'embedded' is the toy task's 32 topics, but train_dataset is your own; evaluate on "
        "your items instead: eval_dataset=<file or dataset>, eval_dataset=held_out (items of train_dataset kept out "
        "of training: held_out_size, held_out_seed), or eval_dataset=null (no evaluation). On the command line: "
        "--data.init_args.task.eval_dataset held_out"
    ]


@pytest.mark.slow  # trains a few steps through the command line
def test_the_command_line_evaluates_on_held_out_items_of_ones_own_file(tmp_path, caplog):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    tiny = ["--model.init_args.sampling.max_new_tokens", "4", "--data.init_args.preference_num_candidates", "2"]
    tiny += ["--data.init_args.num_train_epochs", "1", "--trainer.enable_progress_bar", "false"]
    with caplog.at_level(logging.INFO):
        cli = run_cli(
            ["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path), *tiny]
            + ["--data.init_args.task.train_dataset", str(path), "--data.init_args.task.eval_dataset", "held_out"]
        )
    data = cli.datamodule
    assert len(data.eval_items) == 2 and len(data.train_items) == 18
    assert {item["prompt"] for item in data.evaluation_items()} <= {row["prompt"] for row in ROWS}
    assert "eval_dataset: held_out: 2 of train_dataset's 20 items held out for evaluation" in caplog.text
    assert cli.model.final_eval_reward is not None


def test_an_empty_dataset_is_an_error_before_any_model_loads(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(ValueError, match="train_dataset: training requires at least one task item."):
        fit_without_a_model(tmp_path, train_dataset=str(path), reward_func=lambda a, b: [0.0])
