"""The rewritten check: which asserts are tests, how each is counted, bad items (no process started)."""

from __future__ import annotations

import ast

import pytest

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.coding.check_transform import compile_check, run_check, tainted_names


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


def test_taint_follows_assignments_methods_and_loops_to_a_fixed_point():
    source = """
def check(candidate):
    a = 1
    for i in range(3):
        c = b + 1 if i else 0
        b = candidate(i)
    d = {}
    d[1] = c
    e = [a]
"""
    check = ast.parse(source).body[0]
    assert tainted_names(check) == {"candidate", "b", "c", "d"}


def test_prompt_helpers_and_the_entry_point_name_are_available_to_the_check():
    prompt = "import math\n\ndef helper(x):\n    return 2 * x\n\ndef f(x):\n    '''Doc.'''\n"
    test = "def check(candidate):\n    assert candidate(3) == helper(3)\n    assert f(1) == math.floor(2.5)\n"
    outcome = run_check(compile_check(item(test, prompt=prompt)), lambda x: 2 * x)
    assert outcome.passed == 2


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"task_id": "T/9", "entry_point": "f", "test": ""}, "T/9: its 'test' is missing"),
        ({"task_id": "T/9", "entry_point": "f", "test": "def check(c:\n"}, "T/9: its test does not parse"),
        ({"task_id": "T/9", "test": "def check(c):\n    assert c()\n"}, "T/9: its 'entry_point' is missing"),
        ({"task_id": "T/9", "entry_point": "f g", "test": "def check(c):\n    assert c()\n"}, "not a Python name"),
        ({"task_id": "T/9", "entry_point": "f", "test": "x = 1\n"}, "T/9: its test defines no check"),
        ({"task_id": "T/9", "entry_point": "f", "test": "def check(c):\n    assert True\n"}, "T/9: its check has no"),
    ],
)
def test_a_bad_item_is_a_data_error_naming_its_task_id(bad, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        compile_check(bad)
