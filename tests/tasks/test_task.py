"""Task items and per-agent prompt formatters."""

from __future__ import annotations

import json

import pytest

from comlrl_lightning import MADPOModule, PreferenceDataModule, TaskOptions
from comlrl_lightning.defaults import vowel_length_reward
from comlrl_lightning.tasks.task import (
    Task,
    TemplateFormatter,
    default_formatter,
    load_items,
    resolve_formatter,
)
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_sampling, tiny_trainer
from tests.helpers.unloaded_fit import fit_without_a_model

ITEMS = [{"prompt": "alpha", "id": 1}, {"prompt": "béta", "id": 2}, {"prompt": "gamma", "id": 3}]

EMBEDDED_TRAIN_ITEMS = 16
EMBEDDED_EVAL_ITEMS = 32  # was 8; raised to 32 together with configs/madpo.yaml eval_num_samples


def reward(writer, matcher):
    return [0.0]


# ---------------------------------------------------------------------------------------------
# load_items


def test_load_items_from_a_list():
    items = load_items(ITEMS)
    assert items == ITEMS
    assert items is not ITEMS  # a new list: the caller's list is not aliased
    assert load_items(tuple(ITEMS)) == ITEMS
    assert load_items([]) == []
    assert load_items(None) == []


def test_load_items_from_a_json_list(tmp_path):
    path = tmp_path / "items.json"
    path.write_text(json.dumps(ITEMS, ensure_ascii=False), encoding="utf-8")
    assert load_items(str(path)) == ITEMS


def test_load_items_from_a_json_items_object(tmp_path):
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"name": "toy", "items": ITEMS}), encoding="utf-8")
    assert load_items(str(path)) == ITEMS


def test_load_items_from_jsonl(tmp_path):
    path = tmp_path / "items.jsonl"
    lines = [json.dumps(item, ensure_ascii=False) for item in ITEMS]
    path.write_text(lines[0] + "\n\n" + lines[1] + "\n   \n" + lines[2] + "\n", encoding="utf-8")  # blank lines skipped
    assert load_items(str(path)) == ITEMS


def test_load_items_accepts_path_objects(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(item) for item in ITEMS), encoding="utf-8")
    assert load_items(path) == ITEMS


def test_load_items_embedded_train_and_eval():
    train = load_items("embedded")
    assert load_items("embedded", role="train") == train
    evaluation = load_items("embedded", role="eval")
    assert len(train) == EMBEDDED_TRAIN_ITEMS
    assert len(evaluation) == EMBEDDED_EVAL_ITEMS
    for item in train + evaluation:
        assert isinstance(item, dict)
        assert isinstance(item["prompt"], str) and 3 <= len(item["prompt"]) <= 6
        assert item["prompt"].isalpha() and item["prompt"].islower()
    # deterministic, and the eval items are a different draw
    assert load_items("embedded") == train
    assert load_items("embedded", role="eval") == evaluation
    assert [item["prompt"] for item in train] != [item["prompt"] for item in evaluation[: len(train)]]


def test_load_items_rejects_non_dict_items():
    with pytest.raises(ValueError, match=r"^train_dataset: item 1 is a str, expected an object \(dict\)\.$"):
        load_items([{"prompt": "a"}, "b"])
    with pytest.raises(ValueError, match=r"^eval_dataset: item 0 is a list, expected an object \(dict\)\.$"):
        load_items([["a"]], role="eval")


def test_load_items_rejects_non_dict_items_in_files(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text('{"prompt": "a"}\n42\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"item 1 is a int"):
        load_items(str(path))


# ---------------------------------------------------------------------------------------------
# Formatters


def test_no_formatter_gives_every_agent_the_item_prompt():
    task = Task(None, reward, num_agents=3)
    assert task.num_agents == 3
    assert task.prompts({"prompt": "topic", "other": 1}) == ["topic", "topic", "topic"]
    with pytest.raises(KeyError, match="field 'prompt' is missing"):
        task.prompts({"question": "no prompt field"})


def test_default_formatter():
    assert default_formatter({"prompt": "x"}) == "x"
    for bad in (None, ["a", "b"], 3):  # never silently turned into text
        with pytest.raises(TypeError, match=f"field 'prompt' is a {type(bad).__name__}, expected a string"):
            default_formatter({"prompt": bad})
    assert resolve_formatter(None) is default_formatter


def test_template_string_formatter():
    task = Task("Q: {question}\nA ({lang}):", reward, num_agents=2)
    assert task.prompts({"question": "2+2?", "lang": "en"}) == ["Q: 2+2?\nA (en):", "Q: 2+2?\nA (en):"]
    formatter = resolve_formatter("topic: {prompt}")
    assert isinstance(formatter, TemplateFormatter)
    assert formatter({"prompt": "é", "unused": 1}) == "topic: é"


def test_import_path_formatter():
    task = Task("comlrl_lightning.tasks.task.default_formatter", reward, num_agents=2)
    assert task.formatters == [default_formatter, default_formatter]
    assert task.prompts({"prompt": "p"}) == ["p", "p"]


def test_one_callable_is_replicated():
    task = Task(lambda item: item["prompt"].upper(), reward, num_agents=2)
    assert task.prompts({"prompt": "ab"}) == ["AB", "AB"]


def test_one_formatter_per_agent_of_mixed_kinds():
    task = Task(
        [None, "writer: {prompt}", "comlrl_lightning.tasks.task.default_formatter", lambda item: item["prompt"][::-1]],
        reward,
        num_agents=4,
    )
    assert task.prompts({"prompt": "abc"}) == ["abc", "writer: abc", "abc", "cba"]


@pytest.mark.parametrize("formatters", [["{prompt}"], ["{prompt}", None, None], [], ("{prompt}",)])
def test_formatter_list_length_must_match_num_agents(formatters):
    with pytest.raises(ValueError) as info:
        Task(formatters, reward, num_agents=2)
    assert str(info.value) == "Number of formatters must match num_agents when providing a sequence."


def test_template_missing_field_error():
    task = Task(["topic: {prompt}", "Q: {question}"], reward, num_agents=2)
    with pytest.raises(KeyError) as info:
        task.prompts({"prompt": "p"})
    message = str(info.value)
    assert "Q: {question}" in message
    assert "question" in message.replace("Q: {question}", "")
    assert "'prompt': 'p'" in message


def test_bad_formatter_import_path():
    with pytest.raises(ValueError, match=r"^formatters: cannot import"):
        Task("comlrl_lightning.task.no_such_formatter", reward, num_agents=2)


def test_formatter_must_return_a_string():
    task = Task([None, lambda item: 42], reward, num_agents=2)
    with pytest.raises(TypeError, match="formatter 1 returned int, expected str."):
        task.prompts({"prompt": "p"})


def test_task_builds_the_oracle():
    task = Task(None, "comlrl_lightning.defaults.vowel_length_reward", num_agents=2)
    assert task.oracle.reward_func is vowel_length_reward
    raw, processed = task.oracle.rewards([["aa"], ["bb"]], task.prompts({"prompt": "p"}), {"prompt": "p"})
    assert raw == processed == [1.0]
    with pytest.raises(ValueError, match="reward_func must be a callable."):
        Task(None, None, num_agents=2)


def test_json_object_without_an_items_list_is_a_clear_error(tmp_path):
    import json

    import pytest

    from comlrl_lightning.tasks.task import load_items

    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"data": [{"prompt": "a"}]}))
    with pytest.raises(ValueError, match='holds an object; expected a list of items or {"items": \\[...\\]}'):
        load_items(str(path))


# ----------------------------------------------------------------------------------------------
# Task files that are not what they claim: named by option, file and line


def test_a_json_file_with_a_utf8_byte_order_mark_loads(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"prompt": "ab"}]).encode())
    (tmp_path / "tasks.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"prompt": "cd"}\n')
    assert load_items(str(path)) == [{"prompt": "ab"}]
    assert load_items(str(tmp_path / "tasks.jsonl")) == [{"prompt": "cd"}]


def test_a_non_utf8_byte_in_jsonl_names_the_file_and_line(tmp_path):
    from comlrl_lightning.errors import DataError

    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"prompt": "ab"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(
        DataError, match=rf"^eval_dataset: {path} line 2: not UTF-8 \(byte 0xe9 at byte 16 of the line\)"
    ):
        load_items(str(path), role="eval")
    path = tmp_path / "tasks.json"
    path.write_bytes(b'[\n {"prompt": "ab"},\n {"prompt": "\xff"}\n]')
    with pytest.raises(DataError, match=rf"^train_dataset: {path} line 3: not UTF-8"):
        load_items(str(path))


def test_a_malformed_json_file_and_a_missing_one_are_named(tmp_path):
    from comlrl_lightning.errors import DataError, MissingPathError

    path = tmp_path / "tasks.json"
    path.write_text('[\n {"prompt": "ab"},\n {"prompt": }\n]')
    with pytest.raises(
        DataError, match=rf"^train_dataset: {path} line 3: not valid JSON \(Expecting value, column 13\)"
    ):
        load_items(str(path))
    path.write_text('"just a string"')
    with pytest.raises(DataError, match="holds a str; expected a list of items"):
        load_items(str(path))
    with pytest.raises(MissingPathError, match=rf"^train_dataset: {tmp_path}/absent.jsonl does not exist"):
        load_items(str(tmp_path / "absent.jsonl"))


# ---------------------------------------------------------------------------------------------
# TaskOptions: where the evaluation items come from


def test_held_out_evaluates_on_items_of_the_training_file_that_training_never_sees(tmp_path):
    from comlrl_lightning.tasks.task import TaskOptions

    path = tmp_path / "tasks.jsonl"
    rows = [{"prompt": f"p{index}"} for index in range(10)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    options = TaskOptions(train_dataset=str(path), eval_dataset="held_out", held_out_size=3, held_out_seed=5)
    train, held = options.items()
    assert len(held) == 3 and len(train) == 7
    assert sorted([*train, *held], key=lambda row: int(row["prompt"][1:])) == rows
    assert list(options.train_items()) == list(train) and list(options.eval_items()) == list(held)
    assert list(TaskOptions(train_dataset=rows, eval_dataset="held_out", held_out_size=0.3).eval_items()) != list(
        TaskOptions(train_dataset=rows, eval_dataset="held_out", held_out_size=0.3, held_out_seed=1).eval_items()
    )


def test_the_toy_evaluation_items_beside_ones_own_training_data_are_refused_when_the_items_load(tmp_path):
    from comlrl_lightning.errors import ConfigurationError, MissingPathError
    from comlrl_lightning.tasks.task import TaskOptions

    options = TaskOptions(train_dataset=ITEMS, eval_dataset="embedded")
    for load in (options.items, options.eval_items):
        with pytest.raises(ConfigurationError, match=r"^eval_dataset: 'embedded' is the toy task's 32 topics"):
            load()
    # a missing training file is reported as itself first
    with pytest.raises(MissingPathError, match="^train_dataset: "):
        TaskOptions(train_dataset=str(tmp_path / "absent.jsonl"), eval_dataset="embedded").items()
    assert len(TaskOptions(train_dataset="embedded", eval_dataset="embedded").items()[1]) == EMBEDDED_EVAL_ITEMS
    assert TaskOptions(train_dataset=ITEMS).items() == (ITEMS, [])  # no eval_dataset: no evaluation


def test_a_held_out_size_that_cannot_work_is_refused_when_the_options_are_made():
    from comlrl_lightning.errors import ConfigurationError
    from comlrl_lightning.tasks.task import TaskOptions

    with pytest.raises(ConfigurationError, match=r"^held_out_size: a fraction must be in \(0, 1\), got 1.5"):
        TaskOptions(train_dataset=ITEMS, eval_dataset="held_out", held_out_size=1.5)


@pytest.mark.parametrize(
    "items, formatters, message",
    [
        ([{"prompt": "ab"}, {"question": "no prompt"}], None, "train_dataset: item 1: field 'prompt' is missing"),
        (
            [{"prompt": "ab"}, {"prompt": None}],
            None,
            "train_dataset: item 1: field 'prompt' is a NoneType, expected a string",
        ),
        ([{"prompt": ["a"]}], None, "train_dataset: item 0: field 'prompt' is a list, expected a string"),
        (
            [{"q": "x"}, {"q": "y"}, {"r": 1}],
            ["Q: {q}", "A: {q}"],
            "train_dataset: item 2: formatter template 'Q: {q}' needs field 'q'",
        ),
    ],
)
def test_items_a_formatter_cannot_prompt_are_named_before_any_model_loads(tmp_path, items, formatters, message):
    with pytest.raises(ValueError) as error:
        fit_without_a_model(tmp_path, train_dataset=items, formatters=formatters, reward_func=lambda a, b: [0.0])
    assert message in str(error.value)


def test_a_prompt_that_does_not_fit_the_context_is_named_before_sampling(tmp_path):
    items = [{"prompt": "ab"}, {"prompt": "x" * 496}]  # the embedded GPT-2 has 512 positions
    module = MADPOModule(**{**TINY_MODEL, "sampling": tiny_sampling(max_new_tokens=20)})
    data = PreferenceDataModule(
        **{**TINY_DATA, "task": TaskOptions(train_dataset=items, reward_func=lambda a, b: [0.0])}
    )
    with pytest.raises(
        ValueError,
        match=r"train_dataset: item 1: agent 0's prompt has 49\d tokens; with "
        r"max_new_tokens=20 that is \d+ more than the model's context of 512",
    ):
        tiny_trainer(tmp_path).fit(module, data)
