"""An evaluation by turns (turn_evaluation.py): the headline metric (turn 1's reward, or the return when
there are several turns) and each trajectory's reports, turn by turn."""

from __future__ import annotations

from comlrl_lightning.modules.reward_reports import ReportRecorder
from comlrl_lightning.modules.turn_evaluation import RETURN_MEAN_KEY, TURN_1_KEY, headline_key, turn_reports
from tests.modules.test_reward_reports import Reporting


def test_one_turn_keeps_turn_1_as_its_headline_and_several_turns_report_the_return():
    from comlrl_lightning.tasks.task import Task
    from comlrl_lightning.tasks.turns import Turns

    one = Task(["w {prompt}", "m {prompt}"], reward_func=lambda a, b: [0.0], num_agents=2)
    two = Task(
        ["w {prompt}", "m {prompt}"],
        reward_func=lambda a, b: [0.0],
        num_agents=2,
        turns=Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.reward_feedback"),
    )
    assert headline_key(one) == TURN_1_KEY == "eval/turn_1/reward_mean"  # quoted by the docs: unchanged
    assert headline_key(two) == RETURN_MEAN_KEY == "eval/return_mean"
    assert headline_key(None) == TURN_1_KEY


def test_turn_reports_follow_the_trajectories_that_reached_each_turn():
    recorder = ReportRecorder(Reporting())
    # turn 1 scores items 0, 1, 2; turn 2 only items 0 and 2 (item 1 stopped)
    recorder.reports = ["t1k0", "t1k1", "t1k2", "t2k0", "t2k2"]
    assert turn_reports(recorder, [[0.0, 1.0], [0.5], [0.0, 0.0]]) == [["t1k0", "t2k0"], ["t1k1"], ["t1k2", "t2k2"]]
