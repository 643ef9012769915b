"""An evaluation's reports: what a reporting reward said of each answer, kept as the oracle scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from comlrl_lightning.modules.reward_reports import reporting_oracle, reports_answers
from comlrl_lightning.tasks.oracle import Oracle, score_requests


@dataclass(frozen=True)
class Said:
    reward: float
    note: str


class Reporting:
    """A batch reward that reports the length of each joint answer; counts its calls."""

    accepts_batch = True

    def __init__(self) -> None:
        self.calls = 0

    def reported(self, first: List[str], second: List[str], *, batch_items=None) -> List[Said]:
        self.calls += 1
        return [Said(float(len(a + b)), f"{a}+{b}") for a, b in zip(first, second)]

    def __call__(self, first: List[str], second: List[str], *, batch_items=None) -> List[float]:
        return [said.reward for said in self.reported(first, second, batch_items=batch_items)]


def test_a_reporting_oracle_scores_alike_once_and_keeps_the_reports_in_scoring_order():
    reward = Reporting()
    plain = Oracle(reward, reward_processor=lambda value: value - 1.0)
    requests = [([["a"], ["bb"]], ["p", "q"], {}), ([["ccc"], ["d"]], ["p", "q"], {})]
    expected = score_requests(plain, requests)
    reward.calls = 0
    oracle, recorder = reporting_oracle(plain)
    assert recorder is not None and score_requests(oracle, requests) == expected == [([3.0], [2.0]), ([4.0], [3.0])]
    assert reward.calls == 1  # one batch call, as the plain oracle makes
    assert [said.note for said in recorder.take(2)] == ["a+bb", "ccc+d"] and recorder.take(1) == []


def test_an_oracle_whose_reward_reports_nothing_is_kept_as_it_is():
    plain = Oracle(lambda a, b: [0.0])
    assert not reports_answers(plain.reward_func) and reporting_oracle(plain) == (plain, None)
