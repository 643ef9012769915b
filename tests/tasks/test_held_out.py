"""Evaluation items held out of one's own training data; the embedded toy items beside one's own refused."""

from __future__ import annotations

import pytest

from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.tasks.held_out import (
    ItemView,
    check_evaluation_source,
    held_out_count,
    held_out_split,
    split_summary,
)

ITEMS = [{"prompt": f"item {index}"} for index in range(20)]


@pytest.mark.parametrize(
    "total, size, count",
    [(20, 0.1, 2), (20, 0.25, 5), (3, 0.1, 1), (20, 5, 5), (2, 1, 1), (1000, 0.1, 100)],
)
def test_a_count_is_a_count_and_a_fraction_a_rounded_share_of_at_least_one(total, size, count):
    assert held_out_count(total, size) == count


@pytest.mark.parametrize(
    "total, size, error, fragment",
    [
        (20, 20, DataError, "holding out 20 of train_dataset's 20 items leaves none to train on"),
        (1, 0.5, DataError, "leaves none to train on"),
        (20, 0, ConfigurationError, "a count must be >= 1"),
        (20, 1.0, ConfigurationError, "a fraction must be in (0, 1)"),
        (20, 0.0, ConfigurationError, "a fraction must be in (0, 1)"),
        (20, True, ConfigurationError, "must be a count (int) or a fraction"),
        (20, "10%", ConfigurationError, "must be a count (int) or a fraction"),
    ],
)
def test_sizes_that_cannot_work_are_named(total, size, error, fragment):
    with pytest.raises(error) as raised:
        held_out_count(total, size)
    assert fragment in str(raised.value)


def test_the_split_is_seeded_disjoint_and_covers_every_item_once():
    train, held = held_out_split(ITEMS, 0.25, seed=0)
    assert len(held) == 5 and len(train) == 15
    assert sorted([*train, *held], key=lambda item: int(item["prompt"].split()[1])) == ITEMS
    assert not {item["prompt"] for item in train} & {item["prompt"] for item in held}
    again_train, again_held = held_out_split(ITEMS, 0.25, seed=0)
    assert list(again_held) == list(held) and list(again_train) == list(train)  # the same draw each time
    _, other = held_out_split(ITEMS, 0.25, seed=1)
    assert list(other) != list(held)  # the seed picks the items
    assert list(held) != ITEMS[:5] and list(held) != ITEMS[-5:]  # drawn, not the head or the tail


def test_an_item_view_reads_the_items_where_they_are():
    view = ItemView(ITEMS, [3, 1, 7])
    assert len(view) == 3 and view[0] is ITEMS[3] and list(view) == [ITEMS[3], ITEMS[1], ITEMS[7]]
    assert list(view[:2]) == [ITEMS[3], ITEMS[1]] and isinstance(view[:2], ItemView)
    assert repr(view) == "ItemView(3 of 20 items)"


@pytest.mark.parametrize(
    "train, evaluation",
    [("embedded", "embedded"), (ITEMS, "held_out"), (ITEMS, None), ("tasks.jsonl", "eval.jsonl"), (ITEMS, ITEMS)],
)
def test_every_evaluation_source_but_the_toy_items_beside_ones_own_is_accepted(train, evaluation):
    check_evaluation_source(train, evaluation)


@pytest.mark.parametrize("train", [ITEMS, "tasks.jsonl", {"path": "gsm8k"}])
def test_the_toy_items_beside_ones_own_training_data_are_refused_saying_how_to_evaluate(train):
    with pytest.raises(ConfigurationError) as error:
        check_evaluation_source(train, "embedded")
    message = str(error.value)
    assert message.startswith("eval_dataset: 'embedded' is the toy task's 32 topics, but train_dataset is your own")
    assert "eval_dataset=held_out" in message and "eval_dataset=null" in message
    assert message.endswith("--data.init_args.task.eval_dataset held_out") and "\n" not in message


def test_the_summary_says_how_many_items_train_and_evaluate():
    train, held = held_out_split(ITEMS, 3, seed=4)
    assert split_summary(train, held, 3, 4) == (
        "eval_dataset: held_out: 3 of train_dataset's 20 items held out for evaluation "
        "(held_out_size=3, held_out_seed=4); 17 train"
    )
