"""The cooperative code reward's levels, each on hand-written completions; the tests' outcome is
given by a trusted fake runner (the level logic is what is tested here, the runner has its own tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Sequence

import pytest

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.coding import MAX_REWARD, TRAINING_SHIFT, CooperativeCodeReward, cooperative_code_reward
from comlrl_lightning.tasks.oracle import Oracle

ITEM = {
    "task_id": "Test/0",
    "prompt": 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n',
    "entry_point": "total",
    "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n",
}
AUX = "```python\ndef aux(xs):\n    return sum(xs)\n```"
MAIN_USES_AUX = "```python\ndef total(xs):\n    s = aux(xs)\n    if not xs:\n        return 0\n    return s\n```"


@dataclass(frozen=True)
class Report:
    passed: int
    total: int
    status: str = "finished"
    detail: str = ""

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


class FakeRunner:
    """Every program passes ``passed`` of ``total`` tests; records what it was asked to run."""

    def __init__(self, passed: int, total: int = 2) -> None:
        self.passed, self.total, self.calls = passed, total, []

    def __call__(self, programs: Sequence[str], items: Sequence[Mapping[str, Any]], timeout: float = 10.0) -> List:
        self.calls.append((list(programs), list(items), timeout))
        return [Report(self.passed, self.total) for _ in programs]


def reward(aux: str, main: str, passed: int = 2, total: int = 2) -> float:
    return CooperativeCodeReward(run_tests_batch=FakeRunner(passed, total))([aux], [main], batch_items=[ITEM])[0]


def test_the_maximum_is_four_and_training_shifts_by_minus_four():
    assert MAX_REWARD == pytest.approx(4.0) and TRAINING_SHIFT == pytest.approx(-4.0)
    assert reward(AUX, MAIN_USES_AUX) == pytest.approx(4.0)


def test_no_main_function_stops_after_the_aux_level():
    assert reward(AUX, "I cannot do that.") == pytest.approx(0.4)
    assert reward("nothing", "nothing") == 0.0


def test_a_main_function_without_a_returned_value_stops_scoring():
    assert reward(AUX, "def total(xs):\n    print(sum(xs))\n") == pytest.approx(0.4)
    assert reward(AUX, "def total(xs):\n    return\n") == pytest.approx(0.4)


def test_aux_without_a_return_is_optional():
    main = "def total(xs):\n    return sum(xs)\n"
    assert reward("def aux(xs):\n    pass\n", main) == pytest.approx(0.6 + 0.5 + 1.0)
    assert reward("", main) == pytest.approx(0.6 + 0.5 + 1.0)


def test_a_program_that_does_not_parse_stops_before_the_tests():
    runner = FakeRunner(2)
    main = "def total(xs):\n    return sum(xs\n"  # the whole text does not parse; its def line is found
    value = CooperativeCodeReward(run_tests_batch=runner)([AUX], [main], batch_items=[ITEM])[0]
    assert value == pytest.approx(0.4 + 0.6) and runner.calls == []


def test_the_tests_add_their_passed_fraction():
    main = "def total(xs):\n    return sum(xs)\n"
    assert reward(AUX, main, passed=1, total=4) == pytest.approx(0.4 + 0.6 + 0.5 + 0.25)
    assert reward(AUX, main, passed=0) == pytest.approx(1.5)


def test_calling_aux_earns_a_bonus_only_when_a_test_passes():
    assert reward(AUX, MAIN_USES_AUX, passed=0) == pytest.approx(1.5)
    assert reward(AUX, MAIN_USES_AUX, passed=1) == pytest.approx(1.5 + 0.5 + 0.5 + 1.0)


def test_a_thin_wrapper_gets_the_call_bonus_but_not_the_work_bonus():
    assert reward(AUX, "def total(xs):\n    return aux(xs)\n") == pytest.approx(3.0)
    two_lines = 'def total(xs):\n    """Sum."""\n    result = aux(xs)\n    return result\n'
    assert reward(AUX, two_lines) == pytest.approx(3.0)


def test_dropping_the_value_of_aux_costs_half_a_point():
    main = "def total(xs):\n    aux(xs)\n    return sum(xs)\n"
    assert reward(AUX, main) == pytest.approx(3.5)


def test_the_collaboration_bonus_needs_aux_to_exist():
    assert reward("no code", MAIN_USES_AUX) == pytest.approx(0.6 + 0.5 + 1.0)


def test_agent_one_cannot_write_its_own_aux():
    main = "def aux(xs):\n    return sum(xs)\n\ndef total(xs):\n    s = aux(xs)\n    return s if xs else 0\n"
    assert reward("no code", main) == pytest.approx(2.1)  # its aux is dropped: no aux, no bonus


def test_the_runner_gets_the_combined_programs_of_a_whole_batch_at_once():
    runner = FakeRunner(2)
    values = CooperativeCodeReward(timeout=3.0, run_tests_batch=runner)(
        [AUX, AUX, AUX], [MAIN_USES_AUX, "nothing", MAIN_USES_AUX], batch_items=[ITEM]
    )
    assert values == pytest.approx([4.0, 0.4, 4.0])
    [(programs, items, timeout)] = runner.calls
    assert len(programs) == 2 and items == [ITEM, ITEM] and timeout == 3.0
    assert programs[0].startswith("from typing import List\n\n\ndef aux(xs):")


def test_the_oracle_calls_the_batch_form_once_with_one_value_per_joint_answer():
    runner = FakeRunner(1)
    oracle = Oracle(CooperativeCodeReward(run_tests_batch=runner), lambda value: value + TRAINING_SHIFT)
    [(raw, processed)] = oracle.rewards_many([([[AUX, "x"], [MAIN_USES_AUX, "y"]], ["p", "p"], ITEM)])
    assert raw == pytest.approx([3.5, 0.0]) and processed == pytest.approx([-0.5, -4.0]) and len(runner.calls) == 1


def test_bad_batches_and_items_are_data_errors_naming_the_task():
    with pytest.raises(DataError, match="needs batch_items"):
        cooperative_code_reward([AUX], [MAIN_USES_AUX])
    with pytest.raises(DataError, match="2 joint answers but 3 batch_items"):
        cooperative_code_reward([AUX] * 2, [AUX] * 2, batch_items=[ITEM] * 3)
    with pytest.raises(DataError, match="Test/0: entry_point"):
        cooperative_code_reward([AUX], [AUX], batch_items=[dict(ITEM, entry_point=None)])
    assert CooperativeCodeReward.accepts_batch is True


def test_batch_items_is_keyword_only_so_the_references_trainer_passes_the_two_lists():
    """The reference (CoMLRL) counts a reward's positional parameters: with ``batch_items`` among them
    (three for two agents) it passes the prompts first, the call fails, and its retry leaves the items
    out; keyword-only, the reward gets the agents' two lists and ``batch_items=``. Our oracle calls it
    either way."""
    import inspect

    from comlrl_lightning.tasks.oracle import call_reward_function

    parameter = inspect.signature(CooperativeCodeReward.__call__).parameters["batch_items"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    reward = CooperativeCodeReward(run_tests_batch=FakeRunner(2))
    assert call_reward_function(reward, [[AUX], [MAIN_USES_AUX]], ["p"], [ITEM]) == pytest.approx(4.0)


def test_the_runners_report_counts_the_passed_fraction_and_passed_all_needs_every_test():
    """The runner's own report (not the fake above): the fraction the tests level adds, and pass@1's
    ``passed_all`` (every test passed, and there was at least one)."""
    from comlrl_lightning.tasks.coding.program import combine
    from comlrl_lightning.tasks.coding.reward import CodeScore, level_reward
    from comlrl_lightning.tasks.coding.runner import TestReport

    assert TestReport(1, 4, "finished").fraction == 0.25 and TestReport(0, 0, "finished").fraction == 0.0
    joint = combine(AUX, "def total(xs):\n    return sum(xs)\n", ITEM)
    assert level_reward(joint, TestReport(3, 4, "finished")) == pytest.approx(0.4 + 0.6 + 0.5 + 0.75)
    assert level_reward(joint, None) == pytest.approx(1.5)  # the tests did not run

    def passed_all(passed: int, total: int) -> bool:
        return CodeScore(joint, TestReport(passed, total, "finished"), 0.0).passed_all

    assert passed_all(2, 2) and passed_all(1, 1)
    assert not passed_all(1, 2) and not passed_all(0, 0) and not CodeScore(joint, None, 0.0).passed_all
