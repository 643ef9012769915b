"""The rewritten check: which asserts are tests, how each is counted, Python's semantics where the
check handles exceptions, its time limit, bad items (no process started)."""

from __future__ import annotations

import logging
import re
import time

import pytest

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.coding.check_transform import compile_check, run_check


def item(test: str, entry_point: str = "f", prompt: str = "", task_id: str = "T/1") -> dict:
    return {"task_id": task_id, "entry_point": entry_point, "prompt": prompt, "test": test}


LOOPED = """
def check(candidate):
    assert True, "This prints if this assert fails 1 (good for debugging!)"
    assert candidate(1) == 2
    for x in range(5):
        assert candidate(x) == x + 1
    results = []
    for x in (10, 20):
        results.append(candidate(x))
    assert results == [11, 21]
    assert len([1, 2]) == 2
"""


def test_only_asserts_that_depend_on_the_candidate_are_tests():
    compiled = compile_check(item(LOOPED))
    assert compiled.total == 3  # not `assert True` nor the assert about the check's own data
    assert [test.split(":")[0] for test in compiled.tests] == ["line 4", "line 6", "line 10"]


def test_a_test_inside_a_loop_passes_only_when_every_execution_held():
    right = run_check(compile_check(item(LOOPED)), lambda x: x + 1)
    assert (right.passed, right.executions) == (3, [1, 5, 1])
    wrong_once = run_check(compile_check(item(LOOPED)), lambda x: x + 1 if x != 3 else 0)
    assert wrong_once.passed == 2 and wrong_once.held == [True, False, True]
    assert "line 6" in wrong_once.first_failure


def test_the_check_goes_on_after_a_failure_and_after_a_call_that_raises():
    test = """
def check(candidate):
    value = candidate(0)
    assert value == 1
    assert candidate(2) == 3
"""

    def candidate(x):
        if x == 0:
            raise ValueError("no")
        return x + 1

    outcome = run_check(compile_check(item(test)), candidate)
    assert (outcome.passed, outcome.executions) == (
        1,
        [1, 1],
    )  # the first test ran and failed: value was never assigned
    assert "UnboundLocalError" in outcome.first_failure


def test_a_test_that_never_ran_does_not_pass():
    test = "def check(candidate):\n    for x in candidate():\n        assert x > 0\n"
    assert run_check(compile_check(item(test)), lambda: []).passed == 0
    assert run_check(compile_check(item(test)), lambda: [1, 2]).passed == 1


def test_prompt_helpers_and_the_entry_point_name_are_available_to_the_check():
    prompt = "import math\n\ndef helper(x):\n    return 2 * x\n\ndef f(x):\n    '''Doc.'''\n"
    test = "def check(candidate):\n    assert candidate(3) == helper(3)\n    assert f(1) == math.floor(2.5)\n"
    outcome = run_check(compile_check(item(test, prompt=prompt)), lambda x: 2 * x)
    assert outcome.passed == 2


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"task_id": "T/9", "entry_point": "f", "test": ""}, "T/9: no test"),
        ({"task_id": "T/9", "entry_point": "f", "test": "def check(c:\n"}, "T/9: its test does not parse (line 1"),
        ({"task_id": "T/9", "test": "def check(c):\n    assert c()\n"}, "T/9: entry_point must name"),
        ({"task_id": "T/9", "entry_point": "f g", "test": "def check(c):\n    assert c()\n"}, "entry_point must name"),
        ({"task_id": "T/9", "entry_point": "f", "test": "x = 1\n"}, "T/9: its test defines no check"),
        (
            {"task_id": "T/9", "entry_point": "f", "test": "def check(c):\n    assert True\n"},
            "T/9: check(candidate) has no",
        ),
    ],
)
def test_a_bad_item_is_a_data_error_naming_its_task_id(bad, message):
    with pytest.raises(DataError, match=re.escape(message)):
        compile_check(bad)


# ------------------------------------------------------------------------------------------------
# A test depends on a call of the candidate


@pytest.mark.parametrize(
    "looks_only", ["callable(candidate)", "candidate is not None", "candidate", "getattr(candidate, '__name__')"]
)
def test_an_assert_that_reads_the_candidate_without_calling_it_is_no_test(looks_only):
    with pytest.raises(DataError, match="T/1: check\\(candidate\\) has no test"):
        compile_check(item(f"def check(candidate):\n    assert {looks_only}\n"))
    mixed = compile_check(item(f"def check(candidate):\n    assert {looks_only}\n    assert candidate(1) == 2\n"))
    assert [test.split(":")[0] for test in mixed.tests] == ["line 3"]


def test_calls_through_an_alias_a_helper_or_a_function_handed_the_candidate_are_tests():
    test = """
def twice(g, x):
    return g(g(x))

def check(candidate):
    h = candidate
    assert h(1) == 2
    assert list(map(candidate, [1, 2])) == [2, 3]
    assert twice(candidate, 1) == 3
    def inner(x):
        return candidate(x) * 10
    assert inner(1) == 20
"""
    compiled = compile_check(item(test))
    assert compiled.total == 4
    assert run_check(compiled, lambda x: x + 1).passed == 4
    assert run_check(compiled, lambda x: x + 2).passed == 0


# ------------------------------------------------------------------------------------------------
# Python's semantics where the check handles exceptions


def raising_value_error(x):
    if x < 0:
        raise ValueError("negative")
    return x + 1


def silent(x):
    return x + 1


def raising_type_error(x):
    if x < 0:
        raise TypeError("negative")
    return x + 1


MUST_RAISE = """
def check(candidate):
    assert candidate(1) == 2
    try:
        candidate(-1)
        ok = False
    except ValueError:
        ok = True
    assert ok
    assert candidate(2) == 3
"""


def test_the_must_raise_pattern_passes_a_correct_program_and_fails_a_wrong_one():
    compiled = compile_check(item(MUST_RAISE))
    assert compiled.total == 3  # assert ok is a test: ok depends on whether the call raised
    assert run_check(compiled, raising_value_error).passed == 3
    wrong = run_check(compiled, silent)
    assert (
        wrong.passed == 2 and wrong.held == [True, False, True] and "line 9: ok -> it is false" in wrong.first_failure
    )
    other = run_check(compiled, raising_type_error)  # the wrong exception escapes the check's except
    assert other.passed == 2 and other.held == [True, False, True]


ELSE_AND_ASSERT_IN_TRY = """
def check(candidate):
    try:
        candidate(-1)
    except ValueError:
        pass
    else:
        assert False, "must raise"
    try:
        assert candidate(-2) == 0
    except ValueError:
        pass
    try:
        assert candidate(3) == 4
        after = True
    except Exception:
        after = False
    assert candidate(0) == 1
"""


def test_assert_false_behind_a_call_and_asserts_inside_try_blocks_keep_pythons_semantics():
    compiled = compile_check(item(ELSE_AND_ASSERT_IN_TRY))
    assert compiled.total == 4 and compiled.unless_reached == frozenset({0})
    right = run_check(compiled, raising_value_error)  # the expected ValueError reaches the except: held
    assert right.passed == 4 and right.executions == [0, 1, 1, 1]
    silent_run = run_check(compiled, silent)  # reaches the assert False; candidate(-2) == -1
    assert silent_run.held == [False, False, True, True]
    wrong_type = run_check(compiled, raising_type_error)  # escapes both tries: both blocks' tests fail
    assert wrong_type.held == [False, False, True, True]
    # a failed test inside a try stays failed though the check's except catches its AssertionError
    assert run_check(compiled, lambda x: x).held == [False, False, False, False]


RAISES = """
class raises:
    def __init__(self, kind):
        self.kind = kind
    def __enter__(self):
        return self
    def __exit__(self, kind, error, traceback):
        if error is None:
            raise AssertionError("did not raise")
        return issubclass(kind, self.kind)

def check(candidate):
    with raises(ValueError):
        candidate(-1)
    with raises(ValueError):
        assert candidate(-1) == 0
    assert candidate(1) == 2
"""


def test_a_with_block_that_calls_the_candidate_is_a_test_decided_by_its_context_manager():
    compiled = compile_check(item(RAISES))
    assert [test.split(": ", 1)[1] for test in compiled.tests] == [
        "with raises(ValueError)",
        "with raises(ValueError)",
        "candidate(-1) == 0",
        "candidate(1) == 2",
    ]
    assert run_check(compiled, raising_value_error).passed == 4  # the manager suppressed what the assert raised
    silent_run = run_check(compiled, silent)
    assert silent_run.held == [False, False, True, True] and "did not raise" in silent_run.first_failure
    assert run_check(compiled, raising_type_error).held == [False, False, False, True]


class Stopped(Exception):
    """Stands for the runner's ChildStopped: the program's process has ended."""


def stopped(x):
    raise Stopped("timeout: the wall-clock limit")


def test_an_uncatchable_exception_passes_through_the_checks_except_and_context_managers():
    test = """
import contextlib

def check(candidate):
    try:
        candidate(-1)
        ok = False
    except Exception:
        ok = True
    assert ok
    with contextlib.suppress(Exception):
        candidate(-1)
"""
    compiled = compile_check(item(test))
    assert run_check(compiled, stopped).passed == 2  # as Python would: the except catches it
    outcome = run_check(compiled, stopped, uncatchable=(Stopped,))
    assert outcome.passed == 0 and outcome.held == [False, False]


# ------------------------------------------------------------------------------------------------
# The check's own time limit


LOOPING = """
def check(candidate):
    assert candidate(1) == 2
    while True:
        try:
            pass
        except BaseException:
            pass
"""


def test_a_check_that_loops_ends_at_its_time_limit_with_every_test_failed_and_a_warning(caplog):
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="comlrl_lightning.tasks.coding"):
        outcome = run_check(compile_check(item(LOOPING, task_id="Loop/1")), silent, time_limit=0.2)
    assert time.monotonic() - started < 5
    assert outcome.passed == 0 and "check of Loop/1 stopped: it ran past its 0.2 s time limit" in outcome.first_failure
    assert "coding item Loop/1: its check ran past its 0.2 s time limit" in caplog.text
    assert run_check(compile_check(item(LOOPED)), silent).passed == 3  # the next check runs as before


def test_the_time_limit_counts_the_checks_own_time_not_the_programs_calls():
    def slow(x):
        time.sleep(0.15)
        return x + 1

    test = "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == x + 1\n"
    assert run_check(compile_check(item(test)), slow, time_limit=0.1).passed == 1
