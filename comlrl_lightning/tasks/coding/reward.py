"""The cooperative code reward: the combined program scored in levels, at most 4.0.

* +0.4 if agent 0 defines ``aux`` with a ``return`` of a value (optional: scoring goes on without);
* +0.6 if agent 1 defines the entry point with a ``return`` of a value, else scoring stops;
* +0.5 if the combined program parses, else scoring stops;
* +1.0 x the fraction of the problem's tests the program passes (run by the test runner);
* when at least one test passes and ``aux`` is defined: +0.5 if the entry point calls ``aux``, and
  then +1.0 if it is more than a thin wrapper around it and -0.5 if it drops ``aux``'s return value.

Training uses the reward shifted by -4 (the reference (CoMLRL)'s reward processor, ``shift: -4``),
so a perfect joint answer scores 0. :data:`cooperative_code_reward` takes the reference's calling
convention (``f(aux_completions, main_completions, batch_items=...)``) and declares the batch form
(``accepts_batch``): the oracle hands it a whole round at once and the runner tests the programs in
parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.coding.humaneval import check_problem
from comlrl_lightning.tasks.coding.program import JointProgram, combine

AUX_DEFINED = 0.4
MAIN_DEFINED = 0.6
PARSES = 0.5
TESTS = 1.0
CALLS_AUX = 0.5
NOT_A_WRAPPER = 1.0
IGNORES_AUX_RESULT = -0.5
MAX_REWARD = AUX_DEFINED + MAIN_DEFINED + PARSES + TESTS + CALLS_AUX + NOT_A_WRAPPER
"""4.0: every level reached."""
TRAINING_SHIFT = -MAX_REWARD
"""What training adds to the reward (``RewardProcessors.shift(-4.0)``)."""

TestsRunner = Callable[..., List[Any]]
"""``run_tests_batch(programs, items, timeout=...)`` -> one report per program, each with
``passed``, ``total``, ``status`` and ``fraction`` (:mod:`comlrl_lightning.tasks.coding.runner`)."""


def level_reward(joint: JointProgram, report: Optional[Any]) -> float:
    """The reward of one combined program and its test report (``None``: not run, as scoring stopped)."""
    reward = AUX_DEFINED if joint.aux_returns else 0.0
    if not joint.main_returns:
        return reward
    reward += MAIN_DEFINED
    if not joint.parses:
        return reward
    reward += PARSES
    if report is None:
        return reward
    reward += TESTS * report.fraction
    if report.passed > 0 and joint.aux_defined and joint.calls_aux:
        reward += CALLS_AUX
        if not joint.thin_wrapper:
            reward += NOT_A_WRAPPER
        if joint.ignores_aux_result:
            reward += IGNORES_AUX_RESULT
    return reward


def reaches_tests(joint: JointProgram) -> bool:
    """Whether scoring reaches the tests (the entry point returns a value and the program parses)."""
    return joint.main_returns and joint.parses


@dataclass(frozen=True)
class CodeScore:
    """One joint answer scored: the combined program, its test report (``None`` when scoring stopped
    before the tests) and the reward."""

    joint: JointProgram
    report: Optional[Any]
    reward: float

    @property
    def passed_all(self) -> bool:
        """Every test passed (what pass@1 counts)."""
        return self.report is not None and self.report.total > 0 and self.report.passed == self.report.total


def _items_for(batch_items: Optional[Sequence[Mapping[str, Any]]], count: int) -> List[Mapping[str, Any]]:
    if not batch_items:
        raise DataError("cooperative_code_reward needs batch_items (the task items: entry_point, prompt, test).")
    if len(batch_items) == 1:
        return list(batch_items) * count
    if len(batch_items) != count:
        raise DataError(f"cooperative_code_reward: {count} joint answers but {len(batch_items)} batch_items.")
    return list(batch_items)


def _key(aux: str, main: str, item: Mapping[str, Any]) -> Tuple[str, str, str, str]:
    return aux, main, str(item.get("task_id", "")), str(item.get("entry_point", ""))


def default_runner() -> TestsRunner:
    """The sandboxed test runner's batch form (imported on first use)."""
    from comlrl_lightning.tasks.coding.runner import run_tests_batch

    return run_tests_batch


class CodeScoreCache:
    """The scores of the joint answers a reward scored last, kept for the transition that reads them next.

    The one channel between :class:`CooperativeCodeReward` (which fills it each time it scores) and
    :class:`~comlrl_lightning.tasks.coding.feedback.CodeFeedback` (which takes a turn's test report
    from it instead of running the tests again): both are given the same cache. Bounded: it holds
    the answers of one scoring call, replaced whole by the next call's.
    """

    def __init__(self) -> None:
        self._scores: Dict[Tuple[str, str, str, str], CodeScore] = {}

    def keep(
        self,
        aux_completions: Sequence[str],
        main_completions: Sequence[str],
        items: Sequence[Mapping[str, Any]],
        scores: Sequence["CodeScore"],
    ) -> None:
        """Hold these scores (one per joint answer and item) in place of the ones held so far."""
        self._scores = {_key(a, m, item): s for a, m, item, s in zip(aux_completions, main_completions, items, scores)}

    def get(self, aux_completion: str, main_completion: str, item: Mapping[str, Any]) -> Optional["CodeScore"]:
        """The held score of this joint answer to ``item`` (``None`` when the last call did not score it)."""
        return self._scores.get(_key(aux_completion, main_completion, item))

    def __repr__(self) -> str:
        return f"CodeScoreCache({len(self._scores)} scores)"


class CooperativeCodeReward:
    """The reward of :mod:`comlrl_lightning.tasks.coding.reward`, callable as a task's ``reward_func``.

    Args:
        timeout: seconds one program's tests may take (the runner's wall-clock limit).
        run_tests_batch: the runner (default: the sandboxed one); a test gives its own.
        scores: where each call's scores are kept for a transition that reads them
            (:class:`CodeScoreCache`; ``None``: nowhere).
    """

    accepts_batch: ClassVar[bool] = True
    """The oracle may call it once for many joint answers (one value per answer comes back)."""

    def __init__(
        self,
        timeout: float = 10.0,
        run_tests_batch: Optional[TestsRunner] = None,
        scores: Optional[CodeScoreCache] = None,
    ) -> None:
        if not timeout > 0:
            raise DataError(f"cooperative_code_reward: timeout must be positive (got {timeout}).")
        self.timeout, self.run_tests_batch, self.scores = timeout, run_tests_batch, scores

    def code_scores(
        self,
        aux_completions: Sequence[str],
        main_completions: Sequence[str],
        batch_items: Optional[Sequence[Mapping[str, Any]]],
    ) -> List[CodeScore]:
        """Every joint answer ``(aux_completions[j], main_completions[j])`` scored; the programs that
        reach the tests run in one batch of the runner."""
        if len(aux_completions) != len(main_completions):
            raise DataError(
                f"cooperative_code_reward: {len(aux_completions)} aux completions but {len(main_completions)} main ones."
            )
        items = _items_for(batch_items, len(aux_completions))
        for item in {id(item): item for item in items}.values():
            check_problem(item)
        joints = [combine(aux, main, item) for aux, main, item in zip(aux_completions, main_completions, items)]
        chosen = [index for index, joint in enumerate(joints) if reaches_tests(joint)]
        reports: List[Optional[Any]] = [None] * len(joints)
        if chosen:
            runner = self.run_tests_batch or default_runner()
            ran = runner([joints[i].program for i in chosen], [items[i] for i in chosen], timeout=self.timeout)
            for index, report in zip(chosen, ran):
                reports[index] = report
        scores = [CodeScore(joint, report, level_reward(joint, report)) for joint, report in zip(joints, reports)]
        if self.scores is not None:
            self.scores.keep(aux_completions, main_completions, items, scores)
        return scores

    def __call__(
        self,
        aux_completions: Sequence[str],
        main_completions: Sequence[str],
        *,
        batch_items: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> List[float]:
        """One reward per joint answer (the reference's convention: one list per agent, the items as
        the keyword ``batch_items``; keyword-only, so that the reference (CoMLRL), which counts
        positional parameters, passes the two lists and no prompts)."""
        return [score.reward for score in self.code_scores(aux_completions, main_completions, batch_items)]

    def reported(
        self,
        aux_completions: Sequence[str],
        main_completions: Sequence[str],
        *,
        batch_items: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> List[CodeScore]:
        """What a call returns, as reports: each joint answer's :class:`CodeScore` (its ``reward`` is
        the call's value), which an evaluation keeps for its observers
        (:mod:`comlrl_lightning.modules.reward_reports`)."""
        return self.code_scores(aux_completions, main_completions, batch_items)

    def __repr__(self) -> str:
        return f"CooperativeCodeReward(timeout={self.timeout!r})"


task_scores = CodeScoreCache()
"""The cache the coding task's default reward fills and its default transition
(:data:`~comlrl_lightning.tasks.coding.feedback.code_feedback`) reads."""

cooperative_code_reward = CooperativeCodeReward(scores=task_scores)
"""The coding task's reward function: ``reward_func: comlrl_lightning.tasks.coding.cooperative_code_reward``."""


__all__ = [
    "MAX_REWARD",
    "TRAINING_SHIFT",
    "CodeScore",
    "CodeScoreCache",
    "CooperativeCodeReward",
    "cooperative_code_reward",
    "level_reward",
    "task_scores",
]
