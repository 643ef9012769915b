"""The two roles' prompts: chat conversations rendered with the agent's template; bad items refused first."""

from __future__ import annotations

import pytest

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.coding import HumanEval, aux_prompt, main_prompt
from comlrl_lightning.tasks.task import Task, check_items
from tests.helpers.chat_helpers import TEMPLATE_A, tokenizer_with


def test_agent_zero_writes_aux_and_agent_one_the_entry_point():
    item = HumanEval("eval", limit=1).items()[0]
    aux, main = aux_prompt(item), main_prompt(item)
    assert [m["role"] for m in aux] == ["system", "user"] == [m["role"] for m in main]
    assert "named `aux`" in aux[1]["content"] and "Do not write `has_close_elements`" in aux[1]["content"]
    assert "write `has_close_elements`" in main[1]["content"] and "do not define `aux`" in main[1]["content"]
    assert item["prompt"].strip("\n") in aux[1]["content"] and item["prompt"].strip("\n") in main[1]["content"]


def test_prompts_are_rendered_with_each_agents_chat_template():
    item = HumanEval("eval", limit=1).items()[0]
    task = Task([aux_prompt, main_prompt], lambda a, b: [0.0], num_agents=2).for_team(
        lambda: [tokenizer_with(TEMPLATE_A)] * 2
    )
    aux, main = task.prompts(item)
    assert aux.startswith("system: You are an expert Python programmer") and aux.endswith("assistant:")
    assert "user: You and a partner" in main and "write `has_close_elements`" in main


def test_an_item_without_an_entry_point_stops_the_run_before_sampling():
    task = Task(
        ["comlrl_lightning.tasks.coding.aux_prompt", "comlrl_lightning.tasks.coding.main_prompt"], lambda a, b: [0.0]
    )
    bad = dict(HumanEval("eval", limit=1).items()[0], entry_point="")
    with pytest.raises(DataError, match="train_dataset: item 0: HumanEval/0: entry_point must name"):
        check_items(task, [bad], "train")


def test_an_item_without_a_call_dependent_assert_stops_the_run_when_prompts_are_built_before_any_model(tmp_path):
    """The docs' promise: an item that can never be scored is refused by the data module's setup, as
    it builds the prompts, with the item and its task id; the team module has loaded no model."""
    from comlrl_lightning import MADPOModule, PreferenceDataModule, TaskOptions
    from tests.conftest import TINY_DATA, TINY_MODEL, tiny_team, tiny_trainer

    usable = {"task_id": "Mine/1", "prompt": "def f(x):\n", "entry_point": "f"}
    usable["test"] = "def check(candidate):\n    assert candidate(1) == 2\n"
    looks_only = dict(usable, task_id="Mine/2", test="def check(candidate):\n    assert callable(candidate)\n")
    task = TaskOptions(
        train_dataset=[usable, looks_only],
        eval_dataset=None,
        formatters=["comlrl_lightning.tasks.coding.aux_prompt", "comlrl_lightning.tasks.coding.main_prompt"],
        reward_func="comlrl_lightning.tasks.coding.cooperative_code_reward",
    )
    module = MADPOModule(**{**TINY_MODEL, "team": tiny_team(tokenizers=[tokenizer_with(TEMPLATE_A)] * 2)})
    data = PreferenceDataModule(**{**TINY_DATA, "task": task, "eval_num_samples": 0})
    with pytest.raises(DataError, match=r"^train_dataset: item 1: Mine/2: check\(candidate\) has no test"):
        tiny_trainer(tmp_path).fit(module, data)
    assert module._team is None  # refused before any model loaded
