"""Multi-turn options, the return, the transition's convention and how a conversation grows."""

from __future__ import annotations

import pytest

from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.tasks.chat import ChatPrompt, render_conversation
from comlrl_lightning.tasks.turns import (
    PLAIN_TURN_SEPARATOR,
    TransitionError,
    TurnHistory,
    Turns,
    call_transition,
    next_prompt,
    trajectory_return,
)
from tests.helpers.chat_helpers import TEMPLATE_A, tokenizer_with
from tests.helpers.turn_helpers import not_text, one_message, raising, reward_feedback

FEEDBACK = "tests.helpers.turn_helpers.reward_feedback"


def test_one_turn_is_the_default_and_needs_no_transition():
    turns = Turns()
    assert turns.num_turns == 1 and not turns.multi and turns.transition is None


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_turns=0), "num_turns must be >= 1"),
        (dict(num_turns=2), "num_turns=2 needs an external_transition"),
        (dict(num_turns=2, external_transition="no.such.module.fn"), "external_transition: cannot import"),
        (dict(discount=0.0), "discount must be in (0, 1]"),
        (dict(discount=1.5), "discount must be in (0, 1]"),
        (dict(stop_when=3), "stop_when must be a callable or an import path"),
    ],
)
def test_turn_option_rules(options, message):
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Turns(**options)


def test_transition_by_import_path_resolves():
    assert Turns(num_turns=2, external_transition=FEEDBACK).transition is reward_feedback


def test_return_is_the_last_turn_by_default_or_the_discounted_sum():
    assert trajectory_return([0.2, -1.0, 0.5]) == 0.5
    assert trajectory_return([0.2, -1.0, 0.5], 0.5) == pytest.approx(0.2 - 0.5 + 0.125)
    assert trajectory_return([0.3], 0.9) == pytest.approx(0.3)
    assert Turns(num_turns=2, external_transition=FEEDBACK, discount=1.0).trajectory_return([1.0, 2.0]) == 3.0


def test_early_stop_by_threshold_or_by_stop_when():
    assert Turns(early_termination_threshold=0.0).stops(0.0)
    assert not Turns(early_termination_threshold=0.0).stops(-0.1)
    assert Turns(stop_when=lambda reward: reward > 1).stops(2.0)
    assert not Turns(stop_when=lambda reward: reward > 1).stops(1.0)
    assert not Turns().stops(1e9)


def _history():
    return TurnHistory(prompts=[["p0", "p1"]], responses=[["a", "b"]], raw_rewards=[0.25], rewards=[0.25])


def test_a_transition_gets_the_item_the_turn_and_the_history():
    seen = []

    def transition(item, turn, history):
        seen.append((item, turn, history.responses, history.rewards))
        return ["one", "two"]

    assert call_transition(transition, {"prompt": "x"}, 0, _history(), 2, 3) == ["one", "two"]
    assert seen == [({"prompt": "x"}, 0, [["a", "b"]], [0.25])]


@pytest.mark.parametrize(
    "transition, message",
    [
        (raising, r"raising \(item 5, after turn 1\) raised RuntimeError: feedback service down"),
        (one_message, r"one_message \(item 5, after turn 1\) must return a list of 2 messages.*got 1 values"),
        (not_text, r"not_text \(item 5, after turn 1\) returned a int for agent 1"),
        (lambda item, turn, history: "text", r"must return a list of 2 messages.*got str"),
    ],
    ids=["raises", "wrong-count", "non-string", "not-a-list"],
)
def test_a_bad_transition_is_named_with_the_item_and_the_turn(transition, message):
    with pytest.raises(TransitionError, match=message) as caught:
        call_transition(transition, {}, 1, _history(), 2, 5)
    assert isinstance(caught.value, DataError)
    assert "external_transition" in str(caught.value)


def test_plain_text_layout_appends_response_and_message():
    text = next_prompt(lambda: None, "topic: ab\nwriter:", "xyz", "scored 0.5", "agent 0")
    assert text == "topic: ab\nwriter:xyz" + PLAIN_TURN_SEPARATOR + "scored 0.5\n"
    assert not isinstance(text, ChatPrompt)


def test_chat_rendering_of_turn_two_grows_the_agents_own_conversation():
    tokenizer = tokenizer_with(TEMPLATE_A)
    first = render_conversation(tokenizer, [{"role": "user", "content": "write"}], "agent 0", "test")
    second = next_prompt(lambda: tokenizer, first, "abc", "again", "agent 0")
    assert isinstance(second, ChatPrompt)
    assert second.messages == [
        {"role": "user", "content": "write"},
        {"role": "assistant", "content": "abc"},
        {"role": "user", "content": "again"},
    ]
    assert str(second) == "user: write\nassistant: abc\nuser: again\nassistant:"


def surrogate_messages(item, turn, history):
    return ["fine", "line one \ud800\nline two"]


def test_a_transitions_lone_surrogates_are_replaced_so_the_tokenizer_takes_the_next_prompt():
    tokenizer = tokenizer_with(TEMPLATE_A)
    with pytest.raises(TypeError):  # what the raw message did at the next turn's sampling
        tokenizer("line one \ud800")
    messages = call_transition(surrogate_messages, {}, 1, _history(), 2, 5)
    assert messages == ["fine", "line one \ufffd\nline two"]  # its lines are kept
    prompt = next_prompt(lambda: tokenizer, "write:", "abc", messages[1], "agent 1")
    assert tokenizer(prompt)["input_ids"]


def test_a_transitions_exception_is_reported_in_one_line():
    def multi_line(item, turn, history):
        raise ValueError("first\nsecond\x1b[2K \ud800")

    with pytest.raises(TransitionError) as caught:
        call_transition(multi_line, {}, 1, _history(), 2, 5)
    text = str(caught.value)
    assert "multi_line (item 5, after turn 1) raised ValueError: first\\nsecond\\x1b[2K \\ud800" in text
    assert text.isprintable()
