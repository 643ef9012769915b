"""The oracle: the reward-function calling convention and return handling."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.oracle import Oracle, call_reward_function, resolve_callable

C1, C2 = ["first"], ["second"]
COMPLETIONS = [C1, C2]
PROMPTS = ["the prompt"]
ITEMS = [{"prompt": "the prompt", "id": 7}]


def call(func, completions=COMPLETIONS):
    return call_reward_function(func, completions, PROMPTS, ITEMS)


# ---------------------------------------------------------------------------------------------
# Calling conventions, N = 2


def test_var_args_receive_one_list_per_agent():
    seen = {}

    def reward(*args):
        seen["args"] = args
        return [1.0]

    assert call(reward) == 1.0
    assert seen["args"] == (C1, C2)


def test_var_args_with_named_positional_before():
    seen = {}

    def reward(first, *rest):
        seen["args"] = (first, rest)
        return [0.5]

    assert call(reward) == 0.5
    assert seen["args"] == (C1, (C2,))


def test_exactly_n_positionals():
    seen = {}

    def reward(writer, matcher):
        seen["args"] = (writer, matcher)
        return [2.0]

    assert call(reward) == 2.0
    assert seen["args"] == (C1, C2)


def test_n_plus_one_positionals_get_prompts_first():
    seen = {}

    def reward(prompts, writer, matcher):
        seen["args"] = (prompts, writer, matcher)
        return [3.0]

    assert call(reward) == 3.0
    assert seen["args"] == (PROMPTS, C1, C2)


def test_n_plus_one_positionals_do_not_also_get_prompts_keyword():
    seen = {}

    def reward(a, b, c, **kwargs):
        seen["args"] = (a, b, c)
        seen["kwargs"] = kwargs
        return [3.0]

    assert call(reward) == 3.0
    assert seen["args"] == (PROMPTS, C1, C2)
    assert seen["kwargs"] == {"batch_items": ITEMS}


def test_one_positional_receives_the_list_of_lists():
    seen = {}

    def reward(completions):
        seen["args"] = completions
        return [4.0]

    assert call(reward) == 4.0
    assert seen["args"] == [C1, C2]


def test_other_positional_counts_get_one_list_per_agent():
    seen = {}

    def reward(a, b, c=None, d=None):
        seen["args"] = (a, b, c, d)
        return [5.0]

    assert call(reward) == 5.0
    assert seen["args"] == (C1, C2, None, None)


def test_batch_items_keyword():
    seen = {}

    def reward(writer, matcher, batch_items=None):
        seen["args"] = (writer, matcher, batch_items)
        return [6.0]

    # batch_items is a keyword: the two completion lists still bind as "exactly N positionals"
    assert call(reward) == 6.0
    assert seen["args"] == (C1, C2, ITEMS)


def test_batch_items_keyword_only():
    seen = {}

    def reward(writer, matcher, *, batch_items):
        seen["args"] = (writer, matcher, batch_items)
        return [6.5]

    assert call(reward) == 6.5
    assert seen["args"] == (C1, C2, ITEMS)


def test_prompts_keyword():
    seen = {}

    def reward(writer, matcher, *, prompts):
        seen["args"] = (writer, matcher, prompts)
        return [7.0]

    assert call(reward) == 7.0
    assert seen["args"] == (C1, C2, PROMPTS)


def test_kwargs_receive_both_prompts_and_batch_items():
    seen = {}

    def reward(writer, matcher, **kwargs):
        seen["args"] = (writer, matcher)
        seen["kwargs"] = kwargs
        return [8.0]

    assert call(reward) == 8.0
    assert seen["args"] == (C1, C2)
    assert seen["kwargs"] == {"batch_items": ITEMS, "prompts": PROMPTS}


def test_var_args_and_kwargs():
    seen = {}

    def reward(*args, **kwargs):
        seen["args"] = args
        seen["kwargs"] = kwargs
        return [9.0]

    assert call(reward) == 9.0
    assert seen["args"] == (C1, C2)
    assert seen["kwargs"] == {"batch_items": ITEMS, "prompts": PROMPTS}


def test_no_keywords_when_not_named():
    seen = {}

    def reward(writer, matcher):
        seen["count"] = seen.get("count", 0) + 1
        return [1.0]

    call(reward)
    assert seen["count"] == 1  # bound on the first try, no retry


def test_callable_object_with_call_method():
    class Reward:
        def __init__(self):
            self.seen = None

        def __call__(self, writer, matcher, batch_items=None):
            self.seen = (writer, matcher, batch_items)
            return [1.25]

    reward = Reward()
    assert call(reward) == 1.25
    assert reward.seen == (C1, C2, ITEMS)


def test_three_agents():
    seen = {}

    def reward(prompts, a, b, c):
        seen["args"] = (prompts, a, b, c)
        return [1.0]

    three = [["a"], ["b"], ["c"]]
    assert call(reward, three) == 1.0
    assert seen["args"] == (PROMPTS, ["a"], ["b"], ["c"])


# ---------------------------------------------------------------------------------------------
# Calling conventions, N = 1


def test_single_agent_one_param():
    seen = {}

    def reward(completions):
        seen["args"] = completions
        return [1.5]

    assert call(reward, [C1]) == 1.5
    assert seen["args"] == C1


def test_single_agent_two_params_get_prompts_first():
    seen = {}

    def reward(prompts, completions):
        seen["args"] = (prompts, completions)
        return [2.5]

    assert call(reward, [C1]) == 2.5
    assert seen["args"] == (PROMPTS, C1)


def test_single_agent_one_param_with_kwargs():
    seen = {}

    def reward(completions, **kwargs):
        seen["args"] = completions
        seen["kwargs"] = kwargs
        return [3.5]

    assert call(reward, [C1]) == 3.5
    assert seen["args"] == C1
    assert seen["kwargs"] == {"batch_items": ITEMS, "prompts": PROMPTS}


# ---------------------------------------------------------------------------------------------
# Return coercion: only the first value is used


@pytest.mark.parametrize(
    "returned, expected",
    [
        ([0.5, 9.0], 0.5),
        ((0.25, 9), 0.25),
        (3, 3.0),
        (-1.5, -1.5),
        (torch.tensor([0.75, 2.0]), 0.75),
        (torch.tensor(1.5), 1.5),
        (torch.tensor([[2.0, 3.0]]), 2.0),
        (torch.tensor([4], dtype=torch.int64), 4.0),
        ([torch.tensor(0.125), torch.tensor(9.0)], 0.125),
        ([1], 1.0),
    ],
)
def test_return_coercion(returned, expected):
    def reward(writer, matcher):
        return returned

    value = call(reward)
    assert value == expected
    assert type(value) is float


@pytest.mark.parametrize(
    "returned, expected",
    [
        (np.float32(0.5), 0.5),
        ([np.float64(0.25), 1.0], 0.25),
        (np.array(0.5), 0.5),  # the reference's scalar path: float(x)
        (np.array([0.75]), 0.75),
        (np.array([0.75, 2.0]), 0.75),  # like a tensor: only the first value
        (np.array([[1.5, 2.0]], dtype=np.float32), 1.5),
    ],
)
def test_numpy_return_values(returned, expected):
    def reward(writer, matcher):
        return returned

    value = call(reward)
    assert value == expected
    assert type(value) is float


# ---------------------------------------------------------------------------------------------
# Errors name the function and the value


def test_exception_in_reward_function_names_the_function():
    def exploding_reward(writer, matcher):
        raise ZeroDivisionError("boom in the reward")

    with pytest.raises(Exception, match="exploding_reward") as info:
        call(exploding_reward)
    assert "boom in the reward" in str(info.value)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_type_error_that_persists_names_the_function():
    def needs_four(a, b, c, d):
        return [1.0]

    with pytest.raises(Exception, match="needs_four") as info:
        call(needs_four)
    assert isinstance(info.value.__cause__, TypeError)


@pytest.mark.parametrize(
    "returned, shown",
    [
        ([], "[]"),
        ((), "()"),
        (None, "None"),
        ("abc", "'abc'"),
        (["abc"], "'abc'"),
        (float("nan"), "nan"),
        ([float("nan")], "nan"),
        (float("inf"), "inf"),
        ([float("-inf")], "-inf"),
        (torch.tensor([float("nan")]), "nan"),
        (torch.tensor([]), "[]"),
    ],
)
def test_bad_return_values_raise_value_error_naming_function_and_value(returned, shown):
    def faulty_reward(writer, matcher):
        return returned

    with pytest.raises(ValueError) as info:
        call(faulty_reward)
    message = str(info.value)
    assert "faulty_reward" in message
    assert re.search(r"(?<![\w'])" + re.escape(shown) + r"(?![\w'])", message), message


# ---------------------------------------------------------------------------------------------
# Oracle.score


def test_score_raw_and_processed_with_reward_processor():
    calls = []

    def reward(writer, matcher, *, prompts, batch_items):
        calls.append((writer, matcher, prompts, batch_items))
        return [len(writer[0]) + 10 * len(matcher[0]), 99.0]

    oracle = Oracle(reward, reward_processor=lambda x: 2 * x - 1)
    item = {"prompt": "topic"}
    raw, processed = oracle.rewards([["a", "bb", "ccc"], ["x", "yy", "zzz"]], ["writer prompt", "matcher prompt"], item)
    assert raw == [11.0, 22.0, 33.0]
    assert processed == [21.0, 43.0, 65.0]
    # one call per joint candidate index, single-element lists, agent 0's prompt, the item
    assert calls == [
        (["a"], ["x"], ["writer prompt"], [item]),
        (["bb"], ["yy"], ["writer prompt"], [item]),
        (["ccc"], ["zzz"], ["writer prompt"], [item]),
    ]


def test_score_without_processor_is_identity():
    oracle = Oracle(lambda a, b: [float(len(a[0]) - len(b[0]))])
    raw, processed = oracle.rewards([["aaa", "a"], ["a", "aaaa"]], ["p", "q"], {})
    assert raw == [2.0, -3.0]
    assert processed == raw


def test_score_only_the_minimum_candidate_count():
    calls = []

    def reward(writer, matcher):
        calls.append((writer[0], matcher[0]))
        return [float(len(calls))]

    oracle = Oracle(reward)
    raw, processed = oracle.rewards([["a", "b", "c", "d"], ["x", "y"]], ["p", "q"], {})
    assert calls == [("a", "x"), ("b", "y")]
    assert raw == [1.0, 2.0]
    assert processed == [1.0, 2.0]
    three = Oracle(lambda *texts: [float(len(texts))])
    raw, _ = three.rewards([["a"], ["x", "y", "z"], ["m", "n"]], ["p", "q", "r"], {})
    assert raw == [3.0]


def test_score_by_import_path():
    oracle = Oracle("comlrl_lightning.defaults.vowel_length_reward", reward_processor="math.exp")
    raw, processed = oracle.rewards([["aaaa", "bbbb"], ["cccc", "cc"]], ["p", "q"], {})
    # vowel fraction of the writer minus the relative length gap
    assert raw == [1.0, -0.5]
    assert processed == pytest.approx([math.e, math.exp(-0.5)], rel=1e-12)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "abc", None])
def test_processor_bad_values_are_errors(bad):
    def odd_processor(value):
        return bad

    oracle = Oracle(lambda a, b: [1.0], reward_processor=odd_processor)
    with pytest.raises(ValueError, match="odd_processor"):
        oracle.rewards([["a"], ["b"]], ["p", "q"], {})


def test_oracle_requires_a_reward_function():
    with pytest.raises(ValueError, match="reward_func must be a callable."):
        Oracle(None)


# ---------------------------------------------------------------------------------------------
# resolve_callable


def test_resolve_callable_passes_callables_and_none_through():
    def f():
        return 1

    assert resolve_callable(f, "reward_func") is f
    assert resolve_callable(None, "reward_func") is None


def test_resolve_callable_import_paths():
    from comlrl_lightning.defaults import vowel_length_reward
    from comlrl_lightning.tasks.task import default_formatter

    assert resolve_callable("comlrl_lightning.defaults.vowel_length_reward", "reward_func") is vowel_length_reward
    assert resolve_callable("comlrl_lightning.tasks.task.default_formatter", "formatters") is default_formatter
    assert resolve_callable("math.sqrt", "reward_processor") is math.sqrt


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("no_such_module_xyz.reward", "cannot import"),
        ("comlrl_lightning.defaults.no_such_reward", "cannot import"),
        ("nodots", "cannot import"),
        ("", "cannot import"),
        ("math.pi", "is not callable"),
    ],
)
def test_resolve_callable_bad_paths(spec, fragment):
    with pytest.raises(ValueError) as info:
        resolve_callable(spec, "reward_func")
    message = str(info.value)
    assert message.startswith("reward_func:")
    assert fragment in message
    assert repr(spec) in message


def test_oracle_reports_bad_processor_path_with_its_option_name():
    with pytest.raises(ValueError, match=r"^reward_processor: cannot import 'math\.nope'"):
        Oracle(lambda a, b: [1.0], reward_processor="math.nope")


def test_prompts_parameter_after_the_completions_is_passed_by_keyword():
    from comlrl_lightning.tasks.oracle import call_reward_function

    seen = {}

    def reward(writer, matcher, prompts=None):
        seen.update(writer=writer, matcher=matcher, prompts=prompts)
        return [1.0]

    assert call_reward_function(reward, [["w"], ["m"]], ["p0"], [{}]) == 1.0
    assert seen == {"writer": ["w"], "matcher": ["m"], "prompts": ["p0"]}


def test_a_reward_func_that_is_neither_callable_nor_a_path_is_rejected():
    import pytest

    with pytest.raises(ValueError, match="reward_func must be a callable or an import path \\(got 123\\)"):
        Oracle(123)


class _BatchReward:
    accepts_batch = True

    def __init__(self, wrong_length=False):
        self.calls, self.wrong_length = 0, wrong_length

    def __call__(self, writer, reviewer, batch_items=None, prompts=None):
        self.calls += 1
        values = [len(w) * 10.0 + len(r) + item["bonus"] for w, r, item in zip(writer, reviewer, batch_items)]
        return values[:-1] if self.wrong_length else values


def _per_answer(writer, reviewer, batch_items=None, prompts=None):
    return [len(writer[0]) * 10.0 + len(reviewer[0]) + batch_items[0]["bonus"]]


def test_the_batch_form_and_the_per_answer_form_give_the_same_scores():

    requests = [
        ([["a", "bb", "ccc"], ["x", "", "yy"]], ["p", "q"], {"bonus": 0.5}),
        ([["dddd"], ["zzz", "extra"]], ["p2", "q2"], {"bonus": 2.0}),  # min length: 1 joint answer
        ([[], []], ["p3", "q3"], {"bonus": 1.0}),
    ]
    batch = _BatchReward()
    scored = Oracle(batch, lambda v: v - 4.0).rewards_many(requests)
    assert scored == Oracle(_per_answer, lambda v: v - 4.0).rewards_many(requests)
    assert scored == [([11.5, 20.5, 32.5], [7.5, 16.5, 28.5]), ([45.0], [41.0]), ([], [])] and batch.calls == 1
    assert Oracle(_BatchReward()).rewards_many([requests[2]]) == [([], [])]  # nothing to score: no call


def test_a_batch_reward_must_return_one_value_per_joint_answer():

    with pytest.raises(DataError, match="declares accepts_batch.*3 expected, got 2"):
        Oracle(_BatchReward(wrong_length=True)).rewards_many(
            [([["a", "b", "c"], ["x", "y", "z"]], ["p", "q"], {"bonus": 0})]
        )


def test_scoring_progress_advances_by_items_for_a_batch():
    from comlrl_lightning.tasks.oracle import Oracle, ScoringProgress

    class Counter:
        done = 0

        def advance(self, count=1):
            self.done += count

    counter = Counter()
    progress = ScoringProgress(Oracle(_BatchReward()), counter, calls_per_item=2)
    request = ([["a"], ["b"]], ["p", "q"], {"bonus": 0})
    progress.rewards_many([request] * 4)
    assert counter.done == 2


# ----------------------------------------------------------------------------------------------
# The declared reward range (one function: the callback, the seed API and comlrl_lightning.utils use it)


def _reward_with_range(reward_range):
    def reward(writer, matcher):
        return [0.0]

    if reward_range is not None:
        reward.reward_range = reward_range
    return reward


@pytest.mark.parametrize(
    "reward_range, message",
    [
        (None, "Reader requires reward_func.reward_range to declare the raw reward scale as (minimum, maximum)"),
        ((0.0,), "must be a two-item sequence"),
        ("01", "must be a two-item sequence"),
        (("low", "high"), "values must be numbers"),
        ((0.0, math.inf), "values must be finite"),
        ((1.0, 1.0), "minimum must be less than maximum"),
    ],
)
def test_an_invalid_reward_range_is_a_named_error(reward_range, message):
    from comlrl_lightning.defaults import vowel_length_reward
    from comlrl_lightning.tasks.oracle import resolve_reward_range
    from comlrl_lightning.validation import OptionError

    with pytest.raises(OptionError, match=re.escape(message)):
        resolve_reward_range(_reward_with_range(reward_range), required_by="Reader")
    assert resolve_reward_range(_reward_with_range([-2, 3]), required_by="Reader") == (-2.0, 3.0)
    assert resolve_reward_range(vowel_length_reward) == (-1.0, 1.0)
    if reward_range is None:  # not required: none declared is None
        assert resolve_reward_range(_reward_with_range(None)) is None
    else:  # a declared range is checked whether or not a reader requires one
        with pytest.raises(OptionError, match=re.escape(message)):
            resolve_reward_range(_reward_with_range(reward_range))


def test_a_reward_function_that_raises_inside_is_called_once():
    from comlrl_lightning.tasks.oracle import call_reward_function

    calls = []

    def reward(writer, matcher):
        calls.append(1)  # a side effect: a second call would run it twice
        raise TypeError("bug inside the reward")

    with pytest.raises(RuntimeError, match="reward function .*reward raised TypeError: bug inside the reward"):
        call_reward_function(reward, [["a"], ["b"]], ["p"], [{}])
    assert calls == [1]


def test_a_slow_reward_function_shows_progress():
    from comlrl_lightning.runtime.progress import Progress
    from comlrl_lightning.tasks.oracle import Oracle, ScoringProgress

    lines = []
    clock = iter([0.0, 4.0, 11.0, 12.0, 25.0])  # monotonic seconds at the start and after each of 4 items
    progress = Progress("collection scoring", 5, "item", report=lines.append, interval=10.0, clock=lambda: next(clock))
    scoring = ScoringProgress(Oracle(lambda a, b: [1.0]), progress)
    for _ in range(4):
        assert scoring.rewards([["a"], ["b"]], ["p"], {}) == ([1.0], [1.0])
    assert lines == [
        "collection scoring: 2/5 items (11s elapsed, about 16s left)",
        "collection scoring: 4/5 items (25s elapsed, about 6s left)",
    ]
