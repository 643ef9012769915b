"""predict's JSONL: one record per item, in the items' order across processes, written whole."""

from __future__ import annotations

import json

from comlrl_lightning.callbacks.completions_writer import completion_records, in_item_order, jsonl
from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples


def _samples(turns: bool = False) -> EvaluationSamples:
    return EvaluationSamples(
        items=[{"prompt": "ab"}, {"prompt": "cd"}],
        role_prompts=[["w: ab", "m: ab"], ["w: cd", "m: cd"]],
        completions=[["aa", "bb"], ["cc", "dd"]],
        rewards=[0.5, -0.25],
        earlier_turns=[[["a0", "b0"]], [["c0", "d0"]]] if turns else [[], []],
    )


def test_a_record_holds_the_item_each_roles_prompt_and_completion_and_the_reward():
    first, second = completion_records(_samples())
    assert first == {
        "item": {"prompt": "ab"},
        "prompts": ["w: ab", "m: ab"],
        "completions": ["aa", "bb"],
        "reward": 0.5,
    }
    assert second["reward"] == -0.25 and "earlier_turns" not in second
    assert completion_records(_samples(turns=True))[1]["earlier_turns"] == [["c0", "d0"]]


def test_every_ranks_share_goes_back_into_the_items_order():
    # 5 items over 2 ranks: rank 0 holds items 0, 2, 4 and rank 1 items 1, 3 (every world-th item)
    assert in_item_order([[0, 2, 4], [1, 3]]) == [0, 1, 2, 3, 4]
    assert in_item_order([[0, 3], [1], [2]]) == [0, 1, 2, 3]
    assert in_item_order([]) == []


def test_the_file_is_one_json_object_per_line():
    text = jsonl(completion_records(_samples())).decode("utf-8")
    assert text.endswith("\n") and len(text.splitlines()) == 2
    assert [json.loads(line)["item"]["prompt"] for line in text.splitlines()] == ["ab", "cd"]
    assert json.loads(jsonl([{"item": {"when": object}}]))["item"]["when"] == str(object)  # text, not an error
