"""What the reward said about each evaluated answer, kept as it scores: an evaluation's reports.

A reward function may report on each joint answer beside its value: it then has a method
``reported`` that takes the arguments of its call and returns one report per joint answer, each with
a ``reward`` (the value its call returns), e.g. the coding reward's
:class:`~comlrl_lightning.tasks.coding.reward.CodeScore` with the test report of the program. An
evaluation scores through :func:`reporting_oracle`: the configured reward, called once per answer as
always, with its reports kept in call order (:class:`ReportRecorder`), so an observer reads them
instead of scoring the answers again.
"""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Tuple

from comlrl_lightning.tasks.oracle import Oracle, accepts_batch


def reports_answers(reward_func: Any) -> bool:
    """Whether ``reward_func`` reports on each joint answer (it has a callable ``reported``)."""
    return callable(getattr(reward_func, "reported", None))


class ReportRecorder:
    """A reporting reward function as the oracle calls it: returns its values and keeps its reports.

    Its signature and batch form are the reward's own (the oracle binds the same arguments), and
    each call runs the reward once.

    Args:
        reward_func: a reward function with ``reported`` (:func:`reports_answers`).
    """

    def __init__(self, reward_func: Any) -> None:
        self.reward_func = reward_func
        self.accepts_batch = accepts_batch(reward_func)
        self.reports: List[Any] = []
        """Every report, in the order the joint answers were scored."""
        # the reward's signature (``__wrapped__``, which ``inspect.signature`` follows) and names
        functools.update_wrapper(self, reward_func, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> List[float]:
        reports = list(self.reward_func.reported(*args, **kwargs))
        self.reports += reports
        return [report.reward for report in reports]

    def take(self, count: int) -> List[Any]:
        """The first ``count`` reports not taken yet, in scoring order."""
        taken, self.reports = self.reports[:count], self.reports[count:]
        return taken


def reporting_oracle(oracle: Any) -> Tuple[Any, Optional[ReportRecorder]]:
    """``(oracle to score with, its recorder)``: an :class:`~comlrl_lightning.tasks.oracle.Oracle` of
    a reporting reward becomes one that scores alike and keeps the reports; any other oracle (a
    centralized team's, a reward that reports nothing) is returned as it is, with no recorder."""
    if type(oracle) is not Oracle or not reports_answers(oracle.reward_func):
        return oracle, None
    recorder = ReportRecorder(oracle.reward_func)
    return Oracle(recorder, oracle.reward_processor), recorder


__all__ = ["ReportRecorder", "reporting_oracle", "reports_answers"]
