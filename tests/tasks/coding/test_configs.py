"""The coding configs parse (with the embedded model swapped in) and build the coding task they name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch import LightningDataModule

from comlrl_lightning.cli import main
from comlrl_lightning.tasks.coding import CooperativeCodeReward, HumanEval, aux_prompt, main_prompt

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


@pytest.mark.parametrize("name", ["coding_madpo_iter.yaml", "coding_madpo_iter_2turn.yaml", "coding_marlhf.yaml"])
def test_the_coding_configs_parse_and_name_the_coding_task(name, capsys):
    with pytest.raises(SystemExit):
        main(
            ["fit", "--config", str(CONFIGS / name), "--model.init_args.team.agent_model", "embedded", "--print_config"]
        )
    printed = yaml.safe_load(capsys.readouterr().out)
    team = printed["model"]["init_args"]["team"]
    assert team["agent_model"] == "embedded" and team["num_agents"] == 2
    assert team["lora"]["class_path"] == "peft.LoraConfig"
    sampling = printed["model"]["init_args"]["sampling"]
    assert (sampling["temperature"], sampling["top_p"]) == (0.6, 0.6)
    callbacks = [callback["class_path"] for callback in printed["trainer"]["callbacks"]]
    assert "comlrl_lightning.tasks.coding.CodingEvaluationLog" in callbacks
    assert yaml.safe_load((CONFIGS / name).read_text())["model"]["init_args"]["team"]["agent_model"] == (
        "smollm2-135m-instruct"
    )


@pytest.mark.parametrize("name", ["coding_madpo_iter.yaml", "coding_madpo_iter_2turn.yaml", "coding_marlhf.yaml"])
def test_the_data_section_builds_humaneval_with_the_shifted_reward(name):
    parser = ArgumentParser()
    parser.add_subclass_arguments(LightningDataModule, "data")
    section = {"data": yaml.safe_load((CONFIGS / name).read_text())["data"]}
    data = parser.instantiate(parser.parse_object(section)).data
    options = data.task_options
    assert isinstance(options.train_dataset, HumanEval) and isinstance(options.eval_dataset, HumanEval)
    assert [item["task_id"] for item in options.train_items()] == [f"HumanEval/{i}" for i in range(33, 49)]
    assert len(options.eval_items()) == 32 and data.eval_num_samples == 32
    task = options.build(2)
    assert task.formatters == [aux_prompt, main_prompt]
    assert isinstance(task.oracle.reward_func, CooperativeCodeReward) and task.oracle.process(4.0) == 0.0


def test_the_two_turn_config_differs_from_the_one_turn_config_only_in_its_turns_and_memory():
    from comlrl_lightning.tasks.coding import code_feedback

    one, two = (
        yaml.safe_load((CONFIGS / name).read_text())
        for name in ("coding_madpo_iter.yaml", "coding_madpo_iter_2turn.yaml")
    )
    turns = two["data"]["init_args"]["task"].pop("turns")
    # a batch of two-turn trajectory pairs passed 24 GB without activation checkpointing (same gradients with it)
    assert two["model"]["init_args"]["team"].pop("memory") == {"gradient_checkpointing": True}
    assert two["trainer"].pop("default_root_dir") != one["trainer"].pop("default_root_dir")
    assert one == two
    parser = ArgumentParser()
    parser.add_subclass_arguments(LightningDataModule, "data")
    section = {"data": yaml.safe_load((CONFIGS / "coding_madpo_iter_2turn.yaml").read_text())["data"]}
    task = parser.instantiate(parser.parse_object(section)).data.task_options.build(2)
    assert task.turns.num_turns == 2 and turns["num_turns"] == 2
    assert task.turns.transition is code_feedback and task.turns.discount is None
    assert task.turns.stops(0.0) and not task.turns.stops(-0.5)
