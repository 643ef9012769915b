"""The coding task's transition: after a turn, each agent reads what the tests made of the joint program.

:data:`code_feedback` is an ``external_transition`` (``transition(item, turn, history)``, see
:mod:`comlrl_lightning.tasks.turns`) for two-turn (or longer) coding runs. From the last turn's two
answers it tells each agent, in its own message:

* which functions its code defines, and whether the one it was asked for (``aux`` / the entry
  point) is among them and returns a value;
* where its code does not parse (the line and the parser's message), or that the two answers
  together do not;
* how many of the problem's tests the combined program passed (``k/n``) and the first failing test
  with its error, or why the tests did not run;
* how the entry point uses ``aux``: not at all, only as a thin wrapper, or ignoring its result;

then asks for a revised answer. The test report comes from the reward's scoring of that turn when
it is still at hand (a :class:`~comlrl_lightning.tasks.coding.reward.CodeScoreCache` given to both
the reward and the transition), so the tests usually run once per turn.
Each agent sees only its own code and the shared test outcome, not its partner's answer.
"""

from __future__ import annotations

import ast
from typing import Any, List, Mapping, Optional

from comlrl_lightning.runtime.text import one_line_text
from comlrl_lightning.tasks.coding.program import definitions, strip_fences
from comlrl_lightning.tasks.coding.prompts import AUX_NAME
from comlrl_lightning.tasks.coding.reward import (
    CodeScore,
    CodeScoreCache,
    CooperativeCodeReward,
    cooperative_code_reward,
    task_scores,
)
from comlrl_lightning.tasks.turns import TurnHistory

DETAIL_CHARS = 400
"""The longest failure (or parser message) an agent reads, in characters."""


def syntax_problem(completion: str) -> Optional[str]:
    """``"line N: message"`` where ``completion``'s code (fences stripped) does not parse, else ``None``."""
    try:
        ast.parse(strip_fences(completion))
    except SyntaxError as error:
        return f"line {error.lineno}: {one_line_text(str(error.msg), DETAIL_CHARS)}"
    except ValueError as error:  # null bytes
        return one_line_text(str(error), DETAIL_CHARS)
    return None


def functions_line(completion: str, wanted: str, returns: bool) -> str:
    """Which functions the code defines, and whether ``wanted`` is one of them (returning a value)."""
    names = [definition.name for definition in definitions(completion)]
    found = ", ".join(f"`{name}`" for name in dict.fromkeys(names)) or "none"
    if wanted not in names:
        return f"Functions found in your code: {found}. `{wanted}` is missing."
    if not returns:
        return f"Functions found in your code: {found}. `{wanted}` does not return a value."
    return f"Functions found in your code: {found}."


def tests_line(score: CodeScore) -> str:
    """The tests' outcome: ``k/n tests passed`` and the first failure, or why they did not run. The
    failure's text (which a program under test partly controls: its exception messages, its
    stderr) is one line (:func:`one_line_text`): no newline, terminal escape or bidirectional
    override reaches the model, so no line of this message can be forged."""
    joint, report = score.joint, score.report
    if report is None:
        if not joint.main_returns:
            return "The tests did not run: the main function is missing or returns nothing."
        return "The tests did not run: the two answers together are not a valid Python program."
    line = f"{report.passed}/{report.total} tests passed"
    if report.passed == report.total and report.total:
        return line + "."
    detail = one_line_text(report.detail or report.status, DETAIL_CHARS)
    return f"{line}; first failure: {detail}."


def aux_use_line(score: CodeScore, entry_point: str) -> str:
    """How the entry point uses ``aux`` (empty when there is nothing to say)."""
    joint = score.joint
    if not joint.parses or not joint.main_defined:
        return ""
    if not joint.calls_aux:
        return f"`{entry_point}` does not call `{AUX_NAME}`."
    if joint.ignores_aux_result:
        return f"`{entry_point}` calls `{AUX_NAME}` but ignores its return value."
    if joint.thin_wrapper:
        return f"`{entry_point}` only wraps `{AUX_NAME}`; it should do part of the work itself."
    return f"`{entry_point}` calls `{AUX_NAME}` and uses its result."


def agent_message(completion: str, wanted: str, returns: bool, shared: List[str], revise: str) -> str:
    """One agent's message: its own code's findings, the shared test outcome, the request to revise."""
    lines = [functions_line(completion, wanted, returns)]
    problem = syntax_problem(completion)
    if problem is not None:
        lines.append(f"Your code does not parse: {problem}.")
    return "\n".join(lines + [line for line in shared if line] + [revise])


class CodeFeedback:
    """The coding task's ``external_transition`` (see the module's docstring).

    Args:
        reward: the reward whose test runner judges a turn the cache does not hold (default: the
            task's :data:`~comlrl_lightning.tasks.coding.cooperative_code_reward`).
        scores: the cache the turn's scoring filled (the one given to the reward that scored it;
            ``None``: every turn's tests run again here).
    """

    def __init__(
        self, reward: CooperativeCodeReward = cooperative_code_reward, scores: Optional[CodeScoreCache] = None
    ) -> None:
        self.reward, self.scores = reward, scores

    def turn_code_score(self, aux: str, main: str, item: Mapping[str, Any]) -> CodeScore:
        """The turn's score: the cached one when the turn's scoring kept it, else the tests run again."""
        kept = self.scores.get(aux, main, item) if self.scores is not None else None
        return kept if kept is not None else self.reward.code_scores([aux], [main], [item])[0]

    def __call__(self, item: Mapping[str, Any], turn: int, history: TurnHistory) -> List[str]:
        aux, main = history.responses[-1][:2]
        entry_point = item["entry_point"]
        score = self.turn_code_score(aux, main, item)
        shared = [tests_line(score), aux_use_line(score, entry_point)]
        if score.joint.main_returns and not score.joint.parses and syntax_problem(aux) is syntax_problem(main) is None:
            shared.insert(0, "Each answer parses alone, but the two together do not.")
        ask = "Answer with one revised Python code block and nothing else."
        return [
            agent_message(aux, AUX_NAME, score.joint.aux_returns, shared, f"Revise `{AUX_NAME}`. {ask}"),
            agent_message(main, entry_point, score.joint.main_returns, shared, f"Revise `{entry_point}`. {ask}"),
        ]

    def __repr__(self) -> str:
        return f"CodeFeedback(reward={self.reward!r}, scores={self.scores!r})"


code_feedback = CodeFeedback(cooperative_code_reward, scores=task_scores)
"""The coding task's transition: ``external_transition: comlrl_lightning.tasks.coding.code_feedback``."""


__all__ = [
    "CodeFeedback",
    "agent_message",
    "aux_use_line",
    "functions_line",
    "syntax_problem",
    "code_feedback",
    "tests_line",
]
